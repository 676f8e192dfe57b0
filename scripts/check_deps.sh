#!/usr/bin/env bash
# Checks the dependency direction of README "Dependency direction":
#   kernels/ depends on nothing of ours; runtime/ may use kernels/ but never the generator;
#   generated/ includes only public headers of runtime/ and kernels/ (and its own task headers,
#   "L<level>/<task>.h", through which levels compose); generator/ never uses CUDA.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fail=0
bad() { echo "dependency violation: $*"; fail=1; }

while IFS= read -r hit; do bad "kernels/ includes project code: $hit"; done < <(
  grep -rnE '#include\s*[<"]fk/(runtime|tasks|gen)/' kernels/ 2>/dev/null)
while IFS= read -r hit; do bad "runtime/ includes the generator: $hit"; done < <(
  grep -rnE '#include\s*[<"]fk/gen/' runtime/ 2>/dev/null)
while IFS= read -r hit; do bad "generated/ includes something other than runtime/kernels public headers or generated task headers: $hit"; done < <(
  grep -rnE '#include' generated/ 2>/dev/null |
    grep -vE '#include\s*([<"]fk/(runtime|tasks|kernels)/|"L[0-9]+/[A-Za-z0-9_.+-]+\.h")')
while IFS= read -r hit; do bad "generator/ uses CUDA: $hit"; done < <(
  grep -rnE '#include\s*[<"](cuda|cublas|cudnn|nccl)' generator/ 2>/dev/null;
  grep -nE 'CUDA::|enable_language\(CUDA|cuda_' generator/CMakeLists.txt 2>/dev/null)
if [ "$fail" = 0 ]; then echo "dependency direction: ok"; fi
exit $fail
