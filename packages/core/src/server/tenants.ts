/**
 * Tenants of the client API. A request names its tenant by its bearer token; the daemon derives the key it stores
 * each page under from the tenant and the key the client gave: HMAC-SHA256(tenant secret, client key). Clients only
 * ever name their own keys and the daemon always derives, so one tenant cannot address another tenant's page even
 * when it knows that tenant's key (it would derive a different stored key).
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { hmacSha256Hex } from '@tiersync/native';
import type { PageKey } from '@tiersync/tiers';

export interface Tenant {
  name: string;
  /** Whether it may map the host tier's shared-memory file. */
  sharedMemory: boolean;
  /** Most pages it may hold in reservations and pins at once. */
  maxLeasedPages: number;
  /** The HMAC key of its key derivation. */
  readonly secret: Buffer;
}

export interface TenantConfig {
  name: string;
  token: string;
  sharedMemory: boolean;
  maxLeasedPages: number;
}

/** Client keys: 16..128 lower-case hex characters, as page keys. */
export const CLIENT_KEY_PATTERN = /^[0-9a-f]{16,128}$/;

export class Tenants {
  readonly #byToken: Array<{ token: Buffer; tenant: Tenant }> = [];
  readonly #open: Tenant | undefined;
  readonly #openToken: Buffer | undefined;

  /**
   * `tenants` configured: each request must carry one of their tokens. None: one tenant `default`, which needs
   * `defaultToken` (the http.token) when one is set.
   */
  constructor(tenants: readonly TenantConfig[] | undefined, options: { keySalt?: string; defaultToken?: string; maxLeasedPages?: number }) {
    const make = (name: string, sharedMemory: boolean, maxLeasedPages: number): Tenant => ({
      name,
      sharedMemory,
      maxLeasedPages,
      secret: createHash('sha256').update(`tiersync-tenant\0${name}\0${options.keySalt ?? ''}`).digest(),
    });
    if (tenants && tenants.length) {
      for (const t of tenants) this.#byToken.push({ token: Buffer.from(t.token), tenant: make(t.name, t.sharedMemory, t.maxLeasedPages) });
    } else {
      this.#open = make('default', true, options.maxLeasedPages ?? 65536);
      this.#openToken = options.defaultToken ? Buffer.from(options.defaultToken) : undefined;
    }
  }

  get names(): string[] {
    return this.#open ? [this.#open.name] : this.#byToken.map((t) => t.tenant.name);
  }

  /** The tenant a request speaks for, or undefined when its token is missing or wrong. */
  identify(req: IncomingMessage): Tenant | undefined {
    return this.identifyToken(/^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '');
  }

  /** The tenant of a bearer token ('' when none was given), or undefined when it is wrong. */
  identifyToken(token: string): Tenant | undefined {
    const given = Buffer.from(token);
    if (this.#open) {
      if (!this.#openToken) return this.#open;
      return given.length === this.#openToken.length && timingSafeEqual(given, this.#openToken) ? this.#open : undefined;
    }
    // Compare against every token (no early exit) so timing does not say which prefix matched.
    let found: Tenant | undefined;
    for (const t of this.#byToken) if (given.length === t.token.length && timingSafeEqual(given, t.token)) found = t.tenant;
    return found;
  }

  /** The key a tenant's page is stored under. */
  static storedKey(tenant: Tenant, clientKey: string): PageKey {
    return createHmac('sha256', tenant.secret).update(clientKey).digest('hex');
  }

  /** {@link storedKey} of many client keys in one native call (a store derives one per page). */
  static storedKeys(tenant: Tenant, clientKeys: readonly string[]): PageKey[] {
    return hmacSha256Hex(tenant.secret, clientKeys);
  }
}
