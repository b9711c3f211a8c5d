/**
 * The `kvEvents` section of the daemon config: the KV event stream on ZeroMQ. Off unless it has an endpoint (here or
 * with `tiersync serve --kv-events tcp://127.0.0.1:5557`).
 */
import { z } from 'zod';

const endpoint = z
  .string()
  .regex(/^(tcp:\/\/[^\s]+:(\d+|\*)|ipc:\/\/[^\s]+)$/, 'must be a ZeroMQ endpoint to bind: tcp://HOST:PORT (PORT * picks a free one) or ipc://PATH');

export const kvEventsConfigSchema = z
  .object({
    /** PUB endpoint the daemon binds, e.g. `tcp://127.0.0.1:5557` (`tcp://*:5557` for every interface). Default: none (off). */
    endpoint: endpoint.optional(),
    /** ROUTER endpoint answering replay and snapshot requests, e.g. `tcp://127.0.0.1:5558`. Default: none (no replay). */
    replayEndpoint: endpoint.optional(),
    /** Topic frame of every message (vLLM's default is empty; subscribers filter by prefix). Default ''. */
    topic: z.string().max(255).default(''),
    /**
     * Batches kept for replay. A replay from a sequence older than the oldest kept is answered with a snapshot (the
     * current state as one batch that starts with AllBlocksCleared). Default 10000 (vLLM's buffer_steps).
     */
    replayBatches: z.number().int().min(1).max(10_000_000).default(10_000),
    /** ZeroMQ send high-water mark of the PUB socket, messages (beyond it a slow subscriber loses messages, then replays). Default 100000. */
    sendHighWaterMark: z.number().int().min(1).max(10_000_000).default(100_000),
    /** Most events in one batch; more pending events go out in several batches. Default 4096. */
    maxBatchEvents: z.number().int().min(1).max(1 << 20).default(4096),
    /** Block hash form: `int64` (the key's low 64 bits, vLLM's default) or `bytes` (the whole key). Default int64. */
    hashes: z.enum(['int64', 'bytes']).default('int64'),
    /**
     * `medium` of each tier by tier name, overriding the default from the tier's kind (hbm GPU, host CPU, fs DISK,
     * object and peer REMOTE).
     */
    media: z.record(z.string().min(1), z.string().min(1).max(64)).optional(),
    /**
     * File holding the next sequence number, so numbers continue across restarts. Default `auto`: beside the index
     * (`<index.path>.kv-events`), none with an in-memory index; `false`: none (numbers restart at 0).
     */
    sequenceFile: z.union([z.string().min(1), z.literal(false), z.literal('auto')]).default('auto'),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.replayEndpoint && !c.endpoint) ctx.addIssue({ code: 'custom', path: ['replayEndpoint'], message: 'needs kvEvents.endpoint (the PUB socket it replays)' });
    if (c.replayEndpoint && c.replayEndpoint === c.endpoint) ctx.addIssue({ code: 'custom', path: ['replayEndpoint'], message: 'must differ from kvEvents.endpoint' });
  });

export type KvEventsConfig = z.input<typeof kvEventsConfigSchema>;
export type ResolvedKvEventsConfig = z.output<typeof kvEventsConfigSchema>;
