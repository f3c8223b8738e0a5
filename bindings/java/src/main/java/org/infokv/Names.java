package org.infokv;

import java.util.Arrays;
import java.util.Locale;
import java.util.stream.Collectors;

/** Name lookup shared by the enums that mirror C constants. */
final class Names {
  private Names() {}

  static <E extends Enum<E>> E parse(Class<E> type, E[] values, String name, String what) {
    if (name != null) {
      for (E v : values) if (v.name().equalsIgnoreCase(name.trim())) return v;
    }
    String known = Arrays.stream(values).map(v -> v.name().toLowerCase(Locale.ROOT)).collect(Collectors.joining(", "));
    throw new InfokvException(Status.INVALID_ARGUMENT.code(), "unknown " + what + " \"" + name + "\"; one of " + known);
  }
}
