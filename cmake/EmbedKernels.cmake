# Embeds every file of the kernels/ tree into the library as (relative path, content) pairs, so
# the JIT resolves #includes without knowing where the project was installed. The JIT's cache key
# hashes these contents, never a path (docs/design.md, "JIT").
function(megamoe_embed_kernels out_var kernel_dir)
  file(GLOB_RECURSE _files CONFIGURE_DEPENDS RELATIVE ${kernel_dir}
       ${kernel_dir}/*.cuh ${kernel_dir}/*.h ${kernel_dir}/*.cu)
  list(SORT _files)
  set(_out ${CMAKE_CURRENT_BINARY_DIR}/generated/embedded_kernels.cpp)
  set(_deps)
  foreach(f IN LISTS _files)
    list(APPEND _deps ${kernel_dir}/${f})
  endforeach()
  add_custom_command(
    OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -DKERNEL_DIR=${kernel_dir} -DOUT=${_out} "-DFILES=${_files}"
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedKernelsScript.cmake
    DEPENDS ${_deps} ${PROJECT_SOURCE_DIR}/cmake/EmbedKernelsScript.cmake
    COMMENT "Embedding kernels/ into the library"
    VERBATIM)
  set(${out_var} ${_out} PARENT_SCOPE)
endfunction()
