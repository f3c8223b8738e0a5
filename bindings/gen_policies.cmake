# Writes the Java and Go lists of compression policies from the IKV_POLICY_* constants of the C header, so that a new
# policy reaches every binding without an edit here (Python reads the constants at import: _enums.py).
#   cmake -DHEADER=capi/include/infokv/session.h -DJAVA_OUT=<dir>/Policy.java -DGO_OUT=<dir>/policies.go
#         [-DGOFMT=/usr/bin/gofmt] -P this
# Each #define's preceding /* comment */ becomes the constant's documentation. Go spells the constants as released
# (PolicyInfoKV, PolicyKVzip, ...); a new one is Policy + its name capitalised (IKV_POLICY_FOO_BAR: PolicyFooBar).
file(STRINGS ${HEADER} lines)
set(names)
set(comment "")
set(in_comment FALSE)
foreach(line IN LISTS lines)
  if(line MATCHES "^#define IKV_POLICY_([A-Z0-9_]+) ([0-9]+)")
    list(APPEND names ${CMAKE_MATCH_1})
    set(value_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
    set(doc_${CMAKE_MATCH_1} "${comment}")
    set(comment "")
  elseif(line MATCHES "^/\\*(.*)$")
    set(text "${CMAKE_MATCH_1}")
    set(in_comment TRUE)
    set(comment "")
    if(text MATCHES "^(.*)\\*/ *$")
      set(text "${CMAKE_MATCH_1}")
      set(in_comment FALSE)
    endif()
    string(STRIP "${text}" text)
    set(comment "${text}")
  elseif(in_comment)
    set(text "${line}")
    if(text MATCHES "^(.*)\\*/ *$")
      set(text "${CMAKE_MATCH_1}")
      set(in_comment FALSE)
    endif()
    string(REGEX REPLACE "^ *\\* ?" "" text "${text}")
    string(STRIP "${text}" text)
    set(comment "${comment} ${text}")
  else()
    set(comment "")
  endif()
endforeach()
if(NOT names)
  message(FATAL_ERROR "no IKV_POLICY_* constants in ${HEADER}")
endif()
# A section comment ("Compression policies.") documents the group, not its first constant.
foreach(n IN LISTS names)
  if(doc_${n} STREQUAL "Compression policies.")
    set(doc_${n} "")
  endif()
endforeach()

# ---- Java: an enum of the C values ----
set(java "// Generated from capi/include/infokv/session.h by bindings/gen_policies.cmake at build time; do not edit.\n")
string(APPEND java "package org.infokv;\n\n")
string(APPEND java "/** Compression policies (the C IKV_POLICY_* values); {@link #toString} gives the name the CLI and configs use. */\n")
string(APPEND java "public enum Policy {\n")
list(LENGTH names count)
set(i 0)
foreach(n IN LISTS names)
  math(EXPR i "${i} + 1")
  if(NOT doc_${n} STREQUAL "")
    string(STRIP "${doc_${n}}" d)
    string(APPEND java "  /** ${d} */\n")
  endif()
  if(i EQUAL count)
    set(sep ";")
  else()
    set(sep ",")
  endif()
  string(APPEND java "  ${n}(InfokvNativeConstants.IKV_POLICY_${n})${sep}\n")
endforeach()
string(APPEND java [=[

  private final int code;

  Policy(int code) { this.code = code; }

  /** The C value. */
  public int code() { return code; }

  /** The policy with this C value; INVALID_ARGUMENT for another. */
  public static Policy of(int code) {
    for (Policy p : values()) if (p.code == code) return p;
    throw new InfokvException(Status.INVALID_ARGUMENT.code(), "no policy has the value " + code);
  }

  /** Reads a name ("snapkv", "SnapKV"); INVALID_ARGUMENT naming the known ones otherwise. */
  public static Policy parse(String name) { return Names.parse(Policy.class, values(), name, "policy"); }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
]=])
if(JAVA_OUT)
  file(WRITE ${JAVA_OUT} "${java}")
endif()

# ---- Go: typed constants and their names ----
set(go_spelling_INFOKV InfoKV)
set(go_spelling_SNAPKV SnapKV)
set(go_spelling_H2O H2O)
set(go_spelling_TOVA TOVA)
set(go_spelling_PYRAMIDKV PyramidKV)
set(go_spelling_KVZIP KVzip)
set(go "// Code generated from capi/include/infokv/session.h by bindings/gen_policies.cmake; DO NOT EDIT.\n")
string(APPEND go "// (`cmake --build <build> --target go_capi_update` writes it; a test checks that it is current.)\n\n")
string(APPEND go "package infokv\n\nimport \"github.com/infokv/infokv/bindings/go/internal/capi\"\n\n")
string(APPEND go "// Compression policies.\nconst (\n")
set(map "")
foreach(n IN LISTS names)
  if(DEFINED go_spelling_${n})
    set(g ${go_spelling_${n}})
  else()
    string(TOLOWER "${n}" lower)
    string(REPLACE "_" ";" parts "${lower}")
    set(g "")
    foreach(p IN LISTS parts)
      string(SUBSTRING "${p}" 0 1 first)
      string(SUBSTRING "${p}" 1 -1 rest)
      string(TOUPPER "${first}" first)
      string(APPEND g "${first}${rest}")
    endforeach()
  endif()
  if(NOT doc_${n} STREQUAL "")
    string(STRIP "${doc_${n}}" d)
    string(APPEND go "\t// Policy${g}: ${d}\n")
  endif()
  string(APPEND go "\tPolicy${g} Policy = Policy(capi.IKV_POLICY_${n})\n")
  string(TOLOWER "${n}" lower)
  string(APPEND map "\tPolicy${g}: \"${lower}\",\n")
endforeach()
string(APPEND go ")\n\nvar policyNames = map[Policy]string{\n${map}}\n")
if(GO_OUT)
  file(WRITE ${GO_OUT} "${go}")
  if(GOFMT)  # gofmt aligns the columns as Go code is committed
    execute_process(COMMAND ${GOFMT} -w ${GO_OUT} RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "gofmt failed on ${GO_OUT}")
    endif()
  endif()
endif()
