// Build-time probes for binding.gyp: prints 1 or 0.
const fs = require('node:fs');
const probes = {
  liburing: () => ['/usr/include/liburing.h', '/usr/local/include/liburing.h'].some((p) => fs.existsSync(p)),
  sanitize: () => Boolean(process.env.TIERSYNC_SANITIZE),
};
process.stdout.write(probes[process.argv[2]]?.() ? '1' : '0');
