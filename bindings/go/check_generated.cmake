# Fails when the committed SWIG output in bindings/go/internal/capi (B) differs from what this build generated (A).
foreach(f capi.go capi_wrap.c)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${A}/${f} ${B}/${f} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "bindings/go/internal/capi/${f} is not what SWIG generates from bindings/infokv.i and the "
                        "headers now: run `cmake --build <build> --target go_capi_update` and commit it")
  endif()
endforeach()
# and bindings/go/policies.go (M: the module) from bindings/gen_policies.cmake
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${A}/policies.go ${M}/policies.go RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "bindings/go/policies.go is not what bindings/gen_policies.cmake generates from the header now: "
                      "run `cmake --build <build> --target go_capi_update` and commit it")
endif()
message(STATUS "bindings/go/internal/capi and bindings/go/policies.go are current")
