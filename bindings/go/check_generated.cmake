# Fails when the committed SWIG output in bindings/go/internal/capi (B) differs from what this build generated (A).
foreach(f capi.go capi_wrap.c)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${A}/${f} ${B}/${f} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "bindings/go/internal/capi/${f} is not what SWIG generates from bindings/infokv.i and the "
                        "headers now: run `cmake --build <build> --target go_capi_update` and commit it")
  endif()
endforeach()
message(STATUS "bindings/go/internal/capi is current")
