/** Keys and KV layouts: namespaces, chained page keys, layout sizes and fingerprints. */
export { kvLayout, kvLayoutPreset, kvBytes, KV_PRESETS, DTYPE_BYTES, type KvLayout, type KvLayoutInput, type KvLayerGroup, type KvAttention, type KvDtype, type KvPresetName, type SimpleLayoutInput } from './layout.js';
export { createNamespace, type Namespace, type NamespaceOptions } from './namespace.js';
export { pageKeys, fullPages, KEY_PATTERN, ANCHOR_SPAN, KEY_HEX_LENGTH, type TokenArray, type PageKeyOptions } from './page-keys.js';
