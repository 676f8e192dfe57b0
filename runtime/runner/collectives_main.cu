// fk_collectives: the collectives sweep (collectives_tool.cu), also reachable as `fk_bench collectives`.
#include "collectives_tool.h"

int main(int argc, char** argv) { return fk_collectives_main(argc, argv); }
