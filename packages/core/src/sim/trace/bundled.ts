/** The traces shipped in packages/core/traces (provenance in its SOURCES.md). */
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Path of a bundled trace; default the Mooncake conversation trace. Works from src/ and from dist/. */
export function bundledTrace(name = 'conversation_trace.jsonl.gz'): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  return path.resolve(here, '../../../traces', name);
}
