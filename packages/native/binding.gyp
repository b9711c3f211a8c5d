{
  "targets": [
    {
      "target_name": "tiersync_native",
      "variables": {
        # io_uring through liburing when its header is installed (apt: liburing-dev); a thread-pool path otherwise.
        "has_liburing": "<!(node scripts/gyp-probe.cjs liburing)",
        # TIERSYNC_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer.
        "sanitize": "<!(node scripts/gyp-probe.cjs sanitize)"
      },
      "sources": [
        "cpp/addon.cc", "cpp/bind_arena.cc", "cpp/bind_engine.cc", "cpp/bind_file.cc", "cpp/bind_util.cc",
        "cpp/crc32c.cc", "cpp/cuda.cc", "cpp/engine.cc", "cpp/io_queue.cc", "cpp/memory.cc",
        "cpp/bind_peer.cc", "cpp/frame_aead.cc", "cpp/peer_client.cc", "cpp/peer_protocol.cc", "cpp/peer_server.cc",
        "cpp/bind_lock.cc",
        "cpp/bind_checksum.cc", "cpp/bind_hmac.cc",
        "cpp/bind_resp.cc", "cpp/resp_door.cc", "cpp/resp_mirror.cc", "cpp/resp_parse.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED", "_GNU_SOURCE"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc": ["-std=c++20", "-O3", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "libraries": ["-ldl", "-lpthread"],
      "conditions": [
        ["has_liburing==1", { "defines": ["TIERSYNC_HAVE_LIBURING"], "libraries": ["-luring"] }],
        ["sanitize==1", {
          "cflags_cc": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"],
          "ldflags": ["-fsanitize=address,undefined"]
        }]
      ]
    },
    {
      # The same CRC32C behind a C ABI (cpp/crc32c_capi.cc) for the Python client's ctypes: one pass per page that
      # copies and checksums. Product: build/Release/libtiersync_crc32c.so (the addon itself is unchanged).
      "target_name": "tiersync_crc32c",
      "type": "shared_library",
      "product_prefix": "lib",
      "product_dir": "<(PRODUCT_DIR)",
      "sources": ["cpp/crc32c.cc", "cpp/crc32c_capi.cc"],
      "cflags": ["-fvisibility=hidden"],
      "cflags_cc": ["-std=c++20", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden"],
      "ldflags": ["-Wl,-soname,libtiersync_crc32c.so"]
    }
  ]
}
