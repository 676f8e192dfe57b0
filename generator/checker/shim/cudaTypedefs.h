// fastkernels check shim for <cudaTypedefs.h> (see fk_checker_cuda_shim.h): the driver entry points fk fetches
// through the runtime (cudaGetDriverEntryPoint), as function-pointer types.
#pragma once
#include "fk_checker_cuda_shim.h"
typedef CUresult (*PFN_cuTensorMapEncodeTiled_v12000)(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                                      void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                      const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                                      CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                      CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);
#define PFN_cuTensorMapEncodeTiled PFN_cuTensorMapEncodeTiled_v12000
