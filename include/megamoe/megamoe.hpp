#pragma once
// Everything public in one include.
#include "megamoe/buffer.hpp"
#include "megamoe/config.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/mega_moe.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/pre_dispatch.hpp"
#include "megamoe/precompile.hpp"
#include "megamoe/presets.hpp"
#include "megamoe/side_lora.hpp"
#include "megamoe/types.hpp"
