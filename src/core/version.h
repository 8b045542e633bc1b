// gyre's version string: `gyre --version`, the server's system_fingerprint ("fp_gyre_<version>").
#pragma once

namespace gyre {

inline constexpr const char* kGyreVersion = "0.1";

}  // namespace gyre
