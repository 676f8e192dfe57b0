// fastkernels check shim for <math_constants.h> (see fk_checker_cuda_shim.h): the real header is not parsed.
#pragma once
#include "fk_checker_cuda_shim.h"
