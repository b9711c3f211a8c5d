/** Line splitting of trace text; reading files (streamed, decompressed) lives in byte-stream.ts. */
export { readTraceBytes, fileLines } from './byte-stream.js';

/** Iterates the lines of a text buffer with 1-based numbers, accepting LF or CRLF; skips a final empty line. */
export function* lines(text: string): Generator<[line: string, number: number]> {
  let start = 0;
  let n = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    n++;
    let line = text.slice(start, end);
    if (line.endsWith('\r')) line = line.slice(0, -1);
    yield [line, n];
    start = end + 1;
  }
}
