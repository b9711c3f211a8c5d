/**
 * Namespaces: the model, the KV layout and the tenant that every page key is bound to. Keys from different
 * namespaces never collide, so two models (or two tenants with different salts) can share one index and one set
 * of tiers without ever reusing each other's KV.
 */
import { createHash } from 'node:crypto';
import { TierSyncError, describeValue } from '@tiersync/native/errors';
import { kvLayout, type KvLayout, type KvLayoutInput, type SimpleLayoutInput } from './layout.js';

/** A namespace: its id is part of every page key computed in it. */
export interface Namespace {
  /** 64 lower-case hex characters: SHA-256 of the model fingerprint, layout fingerprint and tenant salt. */
  readonly id: string;
  /** The model fingerprint as given (e.g. `meta-llama/Meta-Llama-3-8B@<revision>`). */
  readonly model: string;
  /** The KV layout fingerprint (32 hex characters). */
  readonly layoutFingerprint: string;
  /** The normalized layout (tokens per page, bytes per page). */
  readonly layout: KvLayout;
  /** Tenant label (for stats and quotas); the salt itself is never kept. Default ''. */
  readonly tenant: string;
}

export interface NamespaceOptions {
  /**
   * Identifies the model weights: name plus revision, or a digest of the weights. Anything that changes the KV a
   * prompt produces (weights, RoPE scaling, tokenizer) must change it. 1..512 characters.
   */
  model: string;
  /** The engine's KV layout (validated and normalized with {@link kvLayout}). */
  layout: KvLayout | KvLayoutInput | SimpleLayoutInput;
  /** Tenant label, 0..128 characters. Default ''. */
  tenant?: string;
  /**
   * Secret salt that keeps this tenant's keys apart from everyone else's (so no tenant can probe another's cache
   * by computing its keys). Default: none, which shares pages among all tenants of the same model and layout.
   */
  tenantSalt?: string | Uint8Array;
}

const NS_TAG = 'tiersync.namespace.1';

function lengthPrefixed(h: ReturnType<typeof createHash>, bytes: Uint8Array): void {
  const len = Buffer.alloc(4);
  len.writeUInt32LE(bytes.length, 0);
  h.update(len).update(bytes);
}

/**
 * Builds a namespace. id = SHA-256( len|"tiersync.namespace.1" || len|model || len|layoutFingerprint || len|salt ),
 * each part prefixed by its byte length as u32 LE so that no two different inputs hash the same bytes.
 * @throws TierSyncError ERR_INVALID_ARGUMENT naming the bad option.
 */
export function createNamespace(options: NamespaceOptions): Namespace {
  if (options === null || typeof options !== 'object') throw new TierSyncError(`options must be an object, got ${describeValue(options)}`, 'ERR_INVALID_ARGUMENT');
  const { model, tenant = '', tenantSalt } = options;
  if (typeof model !== 'string' || model.length < 1 || model.length > 512) {
    throw new TierSyncError(`model must be a string of 1..512 characters, got ${describeValue(model)}`, 'ERR_INVALID_ARGUMENT');
  }
  if (typeof tenant !== 'string' || tenant.length > 128) throw new TierSyncError(`tenant must be a string of 0..128 characters, got ${describeValue(tenant)}`, 'ERR_INVALID_ARGUMENT');
  let salt: Uint8Array;
  if (tenantSalt === undefined) salt = new Uint8Array(0);
  else if (typeof tenantSalt === 'string') salt = Buffer.from(tenantSalt, 'utf8');
  else if (tenantSalt instanceof Uint8Array) salt = tenantSalt;
  else throw new TierSyncError(`tenantSalt must be a string or Uint8Array, got ${describeValue(tenantSalt)}`, 'ERR_INVALID_ARGUMENT');
  const layout = kvLayout(options.layout);
  const h = createHash('sha256');
  lengthPrefixed(h, Buffer.from(NS_TAG, 'utf8'));
  lengthPrefixed(h, Buffer.from(model, 'utf8'));
  lengthPrefixed(h, Buffer.from(layout.fingerprint, 'utf8'));
  lengthPrefixed(h, salt);
  return Object.freeze({ id: h.digest('hex'), model, layoutFingerprint: layout.fingerprint, layout, tenant });
}
