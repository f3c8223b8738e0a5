package org.infokv.wildcard;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.file.*;
import org.infokv.*;
import org.junit.jupiter.api.Test;

/**
 * The usual wildcard imports side by side: this file compiles only while no org.infokv type shares a simple name with
 * a java.nio.file one (NoSuchFileException did).
 */
class WildcardImportsTest {
  @Test
  void javaNioNamesStayUnambiguousBesideInfokv() {
    NoSuchFileException nio = new NoSuchFileException("x");
    assertEquals("x", nio.getFile());
    assertEquals(Status.IO, Status.valueOf("IO"));
    assertTrue(InfokvException.class.isAssignableFrom(MissingFileException.class));
  }
}
