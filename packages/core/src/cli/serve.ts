import { parseArgs } from 'node:util';
import { TierSyncError } from '@tiersync/native';
import { applyEnvOverrides, defaultServerConfig, ENV_OVERRIDES, kvEventsConfigSchema, loadServerConfig, parseServerConfig, TierSyncServer, type ResolvedServerConfig } from '../server/index.js';
import type { Command } from './command.js';

const usage = `Usage: tiersync serve [--config FILE] [--http PORT] [--peer PORT] [--resp PORT]
                     [--kv-events ENDPOINT [--kv-events-replay ENDPOINT]] [--log-level LEVEL]

Runs the per-host daemon: one embedded hierarchy, its host tier served to other hosts over the peer protocol, and
an HTTP control plane (/healthz, /metrics, /v1/stats, POST /v1/lookup, a live dashboard at /, and /v1/client/* for
@tiersync/core/client: processes on this host map the host tier's shared memory, others use the peer protocol).

  --config FILE      YAML or JSON daemon config (the library config plus http, peer, cluster, log sections).
                     Without it: host RAM (2 GiB) + an fs tier and the SQLite index under
                     $XDG_DATA_HOME/tiersync (~/.local/share/tiersync), HTTP 127.0.0.1:7071, peer 127.0.0.1:7070.
  --http PORT        HTTP port (overrides the config; 0 picks a free one)
  --peer PORT        peer data-plane port (overrides the config; 0 picks a free one)
  --resp PORT        serve the RESP (Redis protocol) front door on this port (overrides resp.port; 0 picks a
                     free one); off unless given here or in the config (docs/SERVE.md, RESP front door)
  --kv-events ENDPOINT
                     publish every page reaching or leaving any tier as vLLM KV events on a ZeroMQ PUB socket
                     bound here, e.g. tcp://127.0.0.1:5557 (overrides kvEvents.endpoint; docs/SERVE.md, KV events)
  --kv-events-replay ENDPOINT
                     answer replay ("everything since sequence N") and snapshot requests on a ROUTER socket bound
                     here, e.g. tcp://127.0.0.1:5558 (overrides kvEvents.replayEndpoint)
  --log-level LEVEL  fatal, error, warn, info, debug, trace or silent (logs are JSON lines on stderr)

Environment: ${Object.entries(ENV_OVERRIDES).map(([name, o]) => `${name} (${o.field})`).join(', ')} override the
config file; the flags above override them. The config's JSON Schema: \`tiersync schema config\`.

Stops gracefully on SIGTERM or SIGINT: in-flight requests finish, the index is flushed, exit code 0.`;

function port(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new TierSyncError(`${flag} must be a port number 0..65535, got '${value}'`, 'ERR_INVALID_ARGUMENT');
  return n;
}

/** The kvEvents section with --kv-events / --kv-events-replay applied (validated as the config file is). */
function kvEventsFlags(base: ResolvedServerConfig, endpoint: string | undefined, replay: string | undefined): Pick<ResolvedServerConfig, 'kvEvents'> {
  if (endpoint === undefined && replay === undefined) return {};
  const r = kvEventsConfigSchema.safeParse({ ...base.kvEvents, ...(endpoint !== undefined ? { endpoint } : {}), ...(replay !== undefined ? { replayEndpoint: replay } : {}) });
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const flag = issue.path[0] === 'replayEndpoint' ? '--kv-events-replay' : '--kv-events';
    throw new TierSyncError(`${flag}: ${issue.message}`, 'ERR_INVALID_ARGUMENT');
  }
  return { kvEvents: r.data };
}

export const serveCommand: Command = {
  summary: 'run the per-host daemon: peer endpoint, HTTP control plane, metrics, dashboard, cluster registry',
  usage,
  async run(args) {
    const { values } = parseArgs({ args, options: { config: { type: 'string' }, http: { type: 'string' }, peer: { type: 'string' }, resp: { type: 'string' }, 'kv-events': { type: 'string' }, 'kv-events-replay': { type: 'string' }, 'log-level': { type: 'string' } } });
    const base: ResolvedServerConfig = values.config ? loadServerConfig(values.config) : parseServerConfig(applyEnvOverrides(defaultServerConfig()));
    const httpPort = port(values.http, '--http');
    const peerPort = port(values.peer, '--peer');
    const respPort = port(values.resp, '--resp');
    const level = values['log-level'];
    if (level !== undefined && !['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(level)) {
      throw new TierSyncError(`--log-level must be one of fatal, error, warn, info, debug, trace, silent, got '${level}'`, 'ERR_INVALID_ARGUMENT');
    }
    const config: ResolvedServerConfig = {
      ...base,
      http: { ...base.http, ...(httpPort !== undefined ? { port: httpPort } : {}) },
      peer: { ...base.peer, ...(peerPort !== undefined ? { port: peerPort } : {}) },
      ...(base.resp ? { resp: { ...base.resp, ...(respPort !== undefined ? { port: respPort } : {}) } } : {}),
      ...kvEventsFlags(base, values['kv-events'], values['kv-events-replay']),
      log: { level: (level as ResolvedServerConfig['log']['level'] | undefined) ?? base.log.level },
    };
    const server = await TierSyncServer.start(config);
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGTERM', () => resolve('SIGTERM'));
      process.once('SIGINT', () => resolve('SIGINT'));
    });
    server.log.info({ signal }, 'signal received');
    // A second signal while draining exits at once.
    const again = () => process.exit(130);
    process.once('SIGTERM', again);
    process.once('SIGINT', again);
    await server.close();
    process.off('SIGTERM', again);
    process.off('SIGINT', again);
    // Everything is closed; if some handle still held the event loop open, do not hang the service manager.
    setTimeout(() => {
      server.log.warn('a handle kept the process alive after shutdown; exiting');
      process.exit(0);
    }, 3000).unref();
    return 0;
  },
};
