package org.infokv;

/** What the JNI wrapper calls per generated token (UTF-8 bytes); non-zero stops generation. */
interface NativeTokenSink {
  int onToken(int token, byte[] utf8);
}
