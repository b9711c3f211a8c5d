export { respConfigSchema, type RespConfig, type ResolvedRespConfig } from './config.js';
export { RespDoor, type RespDoorOptions, type RespDoorStats } from './door.js';
export { encodeBulk, encodeCommand, encodeError, encodeInteger, encodeSimple, encodeValue } from './encoder.js';
export { fuzzRespParser, type RespFuzzOptions, type RespFuzzReport } from './fuzz.js';
export { DEFAULT_RESP_LIMITS, RESP_WAIT, RespParser, type BulkTarget, type RespLimits, type RespParserOptions, type RespValue } from './parser.js';
export { TierSyncPageStore, type RespPageStore } from './page-store.js';
