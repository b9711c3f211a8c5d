#include "cuda.h"

#include <dlfcn.h>

#include <mutex>

#include "status.h"

namespace tiersync::cuda {
namespace {

Api api{};
Status status;
std::once_flag once;

template <typename Fn>
bool Bind(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  return out != nullptr;
}

void Load() {
  const char* candidates[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                              "/usr/local/cuda/lib64/libcudart.so", "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so"};
  void* lib = nullptr;
  std::string lastError;
  for (const char* name : candidates) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      status.library = name;
      break;
    }
    const char* e = dlerror();
    lastError = e ? e : name;
  }
  if (!lib) {
    status.reason = "libcudart not found: " + lastError;
    return;
  }
  bool ok = Bind(lib, "cudaGetDeviceCount", api.GetDeviceCount) && Bind(lib, "cudaSetDevice", api.SetDevice) &&
            Bind(lib, "cudaMalloc", api.Malloc) && Bind(lib, "cudaFree", api.Free) &&
            Bind(lib, "cudaMemcpyAsync", api.MemcpyAsync) &&
            Bind(lib, "cudaStreamCreateWithFlags", api.StreamCreateWithFlags) &&
            Bind(lib, "cudaStreamSynchronize", api.StreamSynchronize) &&
            Bind(lib, "cudaStreamDestroy", api.StreamDestroy) && Bind(lib, "cudaHostRegister", api.HostRegister) &&
            Bind(lib, "cudaHostUnregister", api.HostUnregister) &&
            Bind(lib, "cudaGetErrorString", api.GetErrorString) &&
            Bind(lib, "cudaRuntimeGetVersion", api.RuntimeGetVersion);
  if (!ok) {
    status.reason = status.library + " lacks a required symbol";
    return;
  }
  api.RuntimeGetVersion(&status.runtimeVersion);
  int count = 0;  // cudaGetDeviceCount leaves it untouched on failure, so it must start at 0
  Error err = api.GetDeviceCount(&count);
  if (err != 0) {
    status.reason = std::string("cudaGetDeviceCount failed: ") + api.GetErrorString(err) + " (error " +
                    std::to_string(err) + ")";
    return;
  }
  if (count <= 0) {
    status.reason = "CUDA runtime loaded but reports no device";
    return;
  }
  status.devices = count;
  status.available = true;
}

}  // namespace

const Status& GetStatus() {
  std::call_once(once, Load);
  return status;
}

const Api& Require() {
  const Status& s = GetStatus();
  if (!s.available) throw NativeError(Code::Unavailable, "CUDA backend unavailable: " + s.reason);
  return api;
}

void Check(Error err, const char* call) {
  if (err == 0) return;
  throw NativeError(Code::Io, std::string(call) + " failed: " + api.GetErrorString(err) + " (error " +
                                  std::to_string(err) + ")");
}

}  // namespace tiersync::cuda
