// fastkernels check shim for a vendor library header (cuBLAS / cuBLASLt / cuDNN / cudnn-frontend).
// Deliberately empty: a candidate must implement the operator itself, and the checker reports
// every `cublas*` / `cudnn*` identifier in the candidate as SUSPECT(vendor-library) from the
// token stream, whether or not it is declared (use-of-undeclared errors for them are dropped).
#pragma once
#include "fk_checker_cuda_shim.h"
