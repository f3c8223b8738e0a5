// Error type of the C++ core: the core throws infokv::Error; the C shim maps it to a status. Status and Error are
// defined with the kernels (the lowest layer that reports failures), so this header is the core's name for them.
#pragma once
#include "kernels/status.hpp"
