// The CUDA runtime, loaded at run time with dlopen so that the addon builds and runs on machines without CUDA
// headers, libraries, driver or device. Only the handful of runtime calls the engine needs are bound; their
// signatures and enum values follow the CUDA Runtime API reference.
#pragma once
#include <cstddef>
#include <string>

namespace tiersync::cuda {

using Error = int;     // cudaError_t
using Stream = void*;  // cudaStream_t
enum MemcpyKind { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3 };

struct Api {
  Error (*GetDeviceCount)(int*);
  Error (*SetDevice)(int);
  Error (*Malloc)(void**, size_t);
  Error (*Free)(void*);
  Error (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  Error (*StreamCreateWithFlags)(Stream*, unsigned);
  Error (*StreamSynchronize)(Stream);
  Error (*StreamDestroy)(Stream);
  Error (*HostRegister)(void*, size_t, unsigned);
  Error (*HostUnregister)(void*);
  const char* (*GetErrorString)(Error);
  Error (*RuntimeGetVersion)(int*);
};

struct Status {
  bool available = false;
  int devices = 0;
  int runtimeVersion = 0;
  std::string library;  // path that was loaded
  std::string reason;   // why unavailable, in CUDA's own words where it gave any
};

// Loads libcudart once and asks for the device count. Never throws.
const Status& GetStatus();
// The bound API; throws NativeError(Unavailable) with GetStatus().reason when CUDA is unusable.
const Api& Require();
// Throws NativeError(Io) naming the call when err != 0.
void Check(Error err, const char* call);

}  // namespace tiersync::cuda
