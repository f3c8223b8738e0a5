# Writes a .cpp that defines `const char *infokv::schema_text_<NAME>()` returning the text of IN (a .fbs file),
# so the library parses JSON configs with the schema it was built with. Run as: cmake -DIN= -DOUT= -DNAME= -P this.
file(READ "${IN}" _text)
string(FIND "${_text}" ")IKVFBS\"" _bad)
if(NOT _bad EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by schemas/embed_schema.cmake. Do not edit.\nnamespace infokv {\nconst char *schema_text_${NAME}() {\n  return R\"IKVFBS(${_text})IKVFBS\";\n}\n}  // namespace infokv\n")
file(RENAME "${OUT}.tmp" "${OUT}")
