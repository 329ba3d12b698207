# hopperkit CMake package: find_package(hopperkit) then target_link_libraries(app PRIVATE hopperkit::hopperkit)
include(CMakeFindDependencyMacro)
find_dependency(CUDAToolkit)
include("${CMAKE_CURRENT_LIST_DIR}/hopperkitTargets.cmake")
