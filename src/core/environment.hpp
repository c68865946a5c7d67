#pragma once
// The process environment's MEGAMOE_* variables as one value, for memos of launch decisions that
// read tuning variables: a variable set between two calls (tests, tuning sweeps) changes the
// value, so a memo keyed by it never serves a decision made under other settings.
#include <string>

namespace megamoe {

// Every MEGAMOE_* entry of the environment as "NAME=value\n", in the environment's order. One
// pass over the environment (cheaper than the getenv calls it stands for).
std::string megamoe_environment();

}  // namespace megamoe
