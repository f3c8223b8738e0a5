package org.infokv;

import java.lang.ref.Cleaner;

/** The shared Cleaner: a safety net that frees native handles of objects that were never closed. */
final class Handles {
  static final Cleaner CLEANER = Cleaner.create();

  private Handles() {}

  static InfokvException closed(String what) {
    return new InfokvException(Status.BAD_HANDLE.code(), "the " + what + " is closed");
  }

  /**
   * A native handle freed exactly once: by close() or, for an object never closed, by the Cleaner (it runs this).
   * Owners whose calls may race close() (Config.use) hold its lock for the call, so the free waits for it; a call
   * after the free finds the handle gone. A Sampler is used by one thread at a time and takes no lock. With a
   * registry (a model's open sessions), it is in the registry from construction until it is freed.
   */
  static final class Owned<H> implements Runnable {
    volatile H handle;
    private final java.util.function.Consumer<H> free;
    private final String what;
    private final java.util.Set<Runnable> registry;  // null: none

    Owned(H handle, java.util.function.Consumer<H> free, String what) { this(handle, free, what, null); }

    Owned(H handle, java.util.function.Consumer<H> free, String what, java.util.Set<Runnable> registry) {
      this.handle = handle;
      this.free = free;
      this.what = what;
      this.registry = registry;
      if (registry != null) {
        synchronized (registry) {
          registry.add(this);
        }
      }
    }

    @Override
    public synchronized void run() {
      H h = handle;
      handle = null;
      if (h != null) free.accept(h);
      if (registry != null) {
        synchronized (registry) {
          registry.remove(this);
        }
      }
    }

    /** The live handle; BAD_HANDLE once freed. */
    H get() {
      H h = handle;
      if (h == null) throw closed(what);
      return h;
    }
  }

  /**
   * Sets a field of a SWIG options proxy by its C name ("budget_fraction" calls setBudget_fraction): a Number for a
   * numeric field, a String (or null) for a {@code const char *} one such as "device".
   */
  static void setField(Object struct, String name, Object value) {
    String setter = "set" + Character.toUpperCase(name.charAt(0)) + name.substring(1);
    if (name.equals("struct_size") || name.equals("version")) throw badOption(name);
    for (java.lang.reflect.Method m : struct.getClass().getMethods()) {
      if (!m.getName().equals(setter) || m.getParameterCount() != 1) continue;
      Class<?> t = m.getParameterTypes()[0];
      Object arg;
      if (t == String.class) {
        if (value != null && !(value instanceof String)) throw badValue(name, "a string");
        arg = value;
      } else if (!(value instanceof Number)) {
        throw badValue(name, "a number");
      } else if (t == int.class) arg = (int) whole(name, (Number) value, Integer.MIN_VALUE, Integer.MAX_VALUE);
      else if (t == long.class) arg = whole(name, (Number) value, -(1L << 53), 1L << 53);
      else if (t == float.class) arg = ((Number) value).floatValue();
      else if (t == double.class) arg = ((Number) value).doubleValue();
      else if (t == java.math.BigInteger.class) arg = java.math.BigInteger.valueOf(((Number) value).longValue());
      else throw badOption(name);
      try {
        m.invoke(struct, arg);
        return;
      } catch (ReflectiveOperationException e) {
        throw new IllegalStateException(e);
      }
    }
    throw badOption(name);
  }

  /** An integer field's value: a whole number within [lo, hi], never truncated (2.5 for "interval" is refused). */
  private static long whole(String name, Number value, long lo, long hi) {
    double d = value.doubleValue();
    boolean integral = value instanceof Integer || value instanceof Long || value instanceof Short || value instanceof Byte
        || (!Double.isNaN(d) && !Double.isInfinite(d) && d == Math.rint(d));
    long v = value instanceof Long ? value.longValue() : (long) d;
    if (!integral || v < lo || v > hi) throw badValue(name, "a whole number in [" + lo + ", " + hi + "], not " + value);
    return v;
  }

  private static InfokvException badOption(String name) {
    return new InfokvException(Status.INVALID_ARGUMENT.code(), "unknown option " + name);
  }

  private static InfokvException badValue(String name, String what) {
    return new InfokvException(Status.INVALID_ARGUMENT.code(), "option " + name + " takes " + what);
  }
}
