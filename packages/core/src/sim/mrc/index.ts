/** Miss-ratio curves (one-pass LRU stack distances, SHARDS sampling) and the streamed one-pass exact replay. */
export { StackDistance, COLD } from './stack-distance.js';
export { DistanceHistogram } from './histogram.js';
export { hash32, inSample, shardsThreshold } from './shards.js';
export { missRatioCurves, logGrid, mrcCsv, type AccessChunk, type MrcCurve, type MrcOptions, type MrcPoint, type MrcResult } from './curves.js';
export { llmChunks, traceChunks, chunkOpener } from './sources.js';
export { runExactStream } from './replay-stream.js';
