// fastkernels check shim for <cuda_runtime_api.h> (see fk_checker_cuda_shim.h): the real header is not parsed.
#pragma once
#include "fk_checker_cuda_shim.h"
