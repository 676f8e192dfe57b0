// fastkernels check shim (see fk_checker_cuda_shim.h): the real header is not parsed.
#pragma once
#include "fk_checker_cuda_shim.h"
