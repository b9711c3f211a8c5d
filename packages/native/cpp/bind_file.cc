// JS class FileHandle.
#include "binding.h"

namespace tiersync {

FileWrap::FileWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FileWrap>(info) {
  Napi::Env env = info.Env();
  Napi::Object o = OptionsArg(info, 0);
  FileOptions opts;
  opts.path = OptString(o, "path", "");
  if (opts.path.empty()) Throw(env, Code::InvalidArgument, "path must be a non-empty string");
  opts.writable = OptBool(o, "writable", false);
  opts.create = OptBool(o, "create", false);
  opts.truncate = OptBool(o, "truncate", false);
  opts.preallocate = OptUint(o, "preallocate", 0);
  std::string direct = OptString(o, "direct", "auto");
  if (direct == "never")
    opts.direct = DirectMode::Never;
  else if (direct == "auto")
    opts.direct = DirectMode::Auto;
  else if (direct == "always")
    opts.direct = DirectMode::Always;
  else
    Throw(env, Code::InvalidArgument, "direct must be 'never', 'auto' or 'always', got '" + direct + "'");
  if ((opts.create || opts.truncate || opts.preallocate) && !opts.writable)
    Throw(env, Code::InvalidArgument, "create, truncate and preallocate need writable: true");
  file = Guard(env, [&] { return std::make_shared<File>(opts); });
}

// The descriptors close when the last queued batch that uses the file lets go.
Napi::Value FileWrap::Close(const Napi::CallbackInfo& info) {
  if (file) file->Close();
  file.reset();
  return info.Env().Undefined();
}

Napi::Value FileWrap::Size(const Napi::CallbackInfo& info) {
  if (!file) Throw(info.Env(), Code::Closed, "file handle is closed");
  return Napi::Number::New(info.Env(), static_cast<double>(file->Size()));
}

Napi::Value FileWrap::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  if (!file) Throw(env, Code::Closed, "file handle is closed");
  o.Set("path", file->path());
  o.Set("writable", file->writable());
  o.Set("direct", file->directFd() >= 0);
  o.Set("closed", file->closed());
  return o;
}

void InitFile(Napi::Env env, Napi::Object exports) {
  Napi::Function cls = FileWrap::DefineClass(env, "FileHandle",
                                             {
                                                 FileWrap::InstanceMethod("close", &FileWrap::Close),
                                                 FileWrap::InstanceMethod("size", &FileWrap::Size),
                                                 FileWrap::InstanceMethod("info", &FileWrap::Info),
                                             });
  Data(env).file = Napi::Persistent(cls);
  exports.Set("FileHandle", cls);
}

}  // namespace tiersync
