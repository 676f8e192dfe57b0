// The collectives sweep shared by fk_collectives and `fk_bench collectives` (collectives_tool.cu).
#pragma once

/// Parses argv as fk_collectives does (argv[0] the program's name) and runs the sweep; returns the exit code.
int fk_collectives_main(int argc, char** argv);
