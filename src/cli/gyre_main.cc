#include "cli/commands.h"

int main(int argc, char** argv) { return gyre::cli::Main(argc, argv); }
