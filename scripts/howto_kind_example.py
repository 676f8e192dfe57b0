#!/usr/bin/env python3
"""Write the code blocks of docs/HOWTO-add-task-kind.md whose first line is `// <path>` to
<out>/<path>, so that the build can compile the HOWTO's example kind as it stands
(tests/CMakeLists.txt, target fk_howto_kind_tests). Writes only files whose content changed.

    scripts/howto_kind_example.py docs/HOWTO-add-task-kind.md <out>
"""
import os
import re
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    doc, out = sys.argv[1], sys.argv[2]
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    wrote = 0
    for block in re.findall(r"^```cpp\n(.*?)^```", text, flags=re.S | re.M):
        first = block.split("\n", 1)[0]
        m = re.fullmatch(r"// ((?:kernels|runtime|tests)/[\w/.]+\.(?:cuh|h|cu))", first)
        if not m:
            continue
        path = os.path.join(out, m.group(1))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != block:
            with open(path, "w", encoding="utf-8") as f:
                f.write(block)
        wrote += 1
    if wrote != 4:
        sys.exit(f"{doc}: expected 4 code blocks headed by their path (kernel, reference, harness, test), found {wrote}")


if __name__ == "__main__":
    main()
