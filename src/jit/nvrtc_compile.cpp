#include "jit/nvrtc_compile.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "jit/ptxas_info.hpp"

#if MEGAMOE_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace megamoe::jit {
namespace {

bool has_toolkit_headers(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "cuda_bf16.h", ec);
}

}  // namespace

std::string find_cuda_include_dir() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(var);
    if (root != nullptr && *root != '\0' &&
        has_toolkit_headers(std::filesystem::path(root) / "include")) {
      return (std::filesystem::path(root) / "include").string();
    }
  }
#if MEGAMOE_HAVE_NVRTC
  // The toolkit that provides the libnvrtc we run with: <root>/lib64/libnvrtc.so or
  // <root>/targets/<triple>/lib/libnvrtc.so, with the headers in <root>/include or
  // <root>/targets/<triple>/include.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0 && info.dli_fname != nullptr) {
    std::filesystem::path lib_dir = std::filesystem::path(info.dli_fname).parent_path();
    for (std::filesystem::path root = lib_dir.parent_path();
         !root.empty() && root != root.root_path(); root = root.parent_path()) {
      if (has_toolkit_headers(root / "include")) return (root / "include").string();
    }
  }
#endif
  if (has_toolkit_headers("/usr/local/cuda/include")) return "/usr/local/cuda/include";
  return {};
}

std::string cuda_headers_version(const std::string& include_dir) {
  if (include_dir.empty()) return "none";
  std::ifstream in(std::filesystem::path(include_dir) / "cuda.h");
  std::string line;
  while (std::getline(in, line)) {
    const std::string tag = "#define CUDA_VERSION ";
    if (line.starts_with(tag)) return line.substr(tag.size());
  }
  return "unknown";
}

#if MEGAMOE_HAVE_NVRTC

std::string nvrtc_version_string() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return {};
  return std::to_string(major) + "." + std::to_string(minor);
}

NvrtcResult nvrtc_compile(const KernelRequest& request, const IncludeClosure& headers,
                          const std::vector<std::string>& flags) {
  NvrtcResult out;
  std::vector<const char*> header_text, header_names;
  for (const auto& [name, content] : headers.headers) {
    header_names.push_back(name.c_str());
    header_text.push_back(content.c_str());
  }
  // The program name shows in the log; it is the kernel name, never a path.
  const std::string program_name = request.name + ".cu";
  nvrtcProgram program = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&program, request.source.c_str(), program_name.c_str(),
                                     static_cast<int>(header_text.size()), header_text.data(),
                                     header_names.data());
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(r);
    return out;
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&program};

  r = nvrtcAddNameExpression(program, request.entry.c_str());
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcAddNameExpression: ") + nvrtcGetErrorString(r);
    return out;
  }

  std::vector<std::string> all_flags = flags;
  const std::string include_dir = find_cuda_include_dir();
  if (!include_dir.empty()) all_flags.push_back("-I" + include_dir);
  std::vector<const char*> argv;
  for (const std::string& f : all_flags) argv.push_back(f.c_str());

  const auto start = std::chrono::steady_clock::now();
  r = nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  out.kernel.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::size_t log_size = 0;
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.kernel.log.resize(log_size);
    nvrtcGetProgramLog(program, out.kernel.log.data());
    // Drop the terminating NUL(s): the ptxas part of the log may bring its own.
    while (!out.kernel.log.empty() && out.kernel.log.back() == '\0') out.kernel.log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    out.error = nvrtcGetErrorString(r);
    return out;
  }

  std::size_t size = 0;
  if (nvrtcGetCUBINSize(program, &size) != NVRTC_SUCCESS || size == 0) {
    out.error = "nvrtcGetCUBIN: no cubin (the arch must be a real sm_XXa target)";
    return out;
  }
  out.kernel.cubin.resize(size);
  nvrtcGetCUBIN(program, out.kernel.cubin.data());
  if (nvrtcGetPTXSize(program, &size) == NVRTC_SUCCESS && size > 1) {
    out.ptx.resize(size);
    nvrtcGetPTX(program, out.ptx.data());
    out.ptx.resize(size - 1);
  }
  const char* lowered = nullptr;
  r = nvrtcGetLoweredName(program, request.entry.c_str(), &lowered);
  if (r != NVRTC_SUCCESS || lowered == nullptr) {
    out.error =
        std::string("nvrtcGetLoweredName('") + request.entry + "'): " + nvrtcGetErrorString(r);
    return out;
  }
  out.kernel.lowered_name = lowered;

  const PtxasInfo info = parse_ptxas_info(out.kernel.log);
  out.kernel.registers = info.registers;
  out.kernel.local_bytes = info.local_bytes;
  out.kernel.spill_bytes = info.spill_bytes;
  out.ok = true;
  return out;
}

#else

std::string nvrtc_version_string() {
  return {};
}

NvrtcResult nvrtc_compile(const KernelRequest&, const IncludeClosure&,
                          const std::vector<std::string>&) {
  NvrtcResult out;
  out.error = "this build of megamoe has no NVRTC";
  return out;
}

#endif

}  // namespace megamoe::jit
