/**
 * Job ids the service derives itself: `idem_…` from an Idempotency-Key header, `whk_…` for a
 * webhook delivery. Both prefixes are reserved: a caller's own `options.jobId` may not start with
 * them, so no API key can take the id another key's request or another job's webhook will need.
 *
 * The hash is an HMAC, so the ids cannot be computed from public inputs (key id, queue, header).
 * Its key, first found wins:
 *   1. the configured server secret (`idSecret`, else `streamTokenSecret`): the same on every
 *      instance that shares it;
 *   2. for ids derived for an API key (Idempotency-Key jobs), a key derived from that API key's
 *      configured SHA-256: secret from every other key, and the same across restarts and on every
 *      instance with the same key configuration, with nothing more to configure. Rotating the key
 *      (a new `sha256` under the same id) changes its ids;
 *   3. none (a plain SHA-256): only without authentication (`apiKeys: false`), where every caller
 *      may do everything anyway, and for webhook deliveries without `WebhookOptions.idSecret`.
 * A per-process random default is deliberately not offered: it would give a retry that reaches
 * another instance, or comes after a restart, a new id, and store its job twice. Changing the
 * key changes the ids: an Idempotency-Key retried across the change, or a delivery re-sent by the
 * sweep across it, is then stored a second time.
 */
import { createHash, createHmac } from "node:crypto";
import { InvalidInputError } from "../core/errors.js";
import { SCHEDULE_JOB_ID_PREFIX } from "../core/schedule.js";

export const IDEMPOTENCY_ID_PREFIX = "idem_";
export const WEBHOOK_ID_PREFIX = "whk_";
/** `cron_…`: the ids of cron schedules' tick jobs (core/schedule.ts), so no key can take a tick's id first. */
export const RESERVED_ID_PREFIXES: readonly string[] = [IDEMPOTENCY_ID_PREFIX, WEBHOOK_ID_PREFIX, SCHEDULE_JOB_ID_PREFIX];

/** The reserved prefix `id` starts with, or null. */
export function reservedPrefixOf(id: string): string | null {
  return RESERVED_ID_PREFIXES.find((p) => id.startsWith(p)) ?? null;
}

/** At least this many bytes of secret (32: as many as the HMAC's own output). */
const MIN_SECRET_BYTES = 32;

export class IdDeriver {
  private readonly secret: Buffer | null;

  /**
   * `secret`: at least 32 bytes, the same on every instance; none = the owner's key (see
   * `derive`), else unkeyed SHA-256. `ownerKeyHash`: the SHA-256 configured for an API key id now
   * (`KeyRing.keyHashOf`), or null.
   */
  constructor(
    secret: string | Buffer | undefined,
    option: string,
    private readonly ownerKeyHash: (ownerId: string) => Buffer | null = () => null,
  ) {
    if (secret === undefined) {
      this.secret = null;
      return;
    }
    this.secret = typeof secret === "string" ? Buffer.from(secret, "utf8") : secret;
    if (this.secret.length < MIN_SECRET_BYTES) {
      throw new InvalidInputError(`${option} must be at least ${MIN_SECRET_BYTES} bytes; generate one with: openssl rand -base64 32`);
    }
  }

  /**
   * `prefix` + 32 characters of base64url hash over `parts` (NUL-separated: no part can spill into
   * another), keyed as the file's comment says; `ownerId`: the API key the id is derived for.
   */
  derive(prefix: string, parts: readonly string[], ownerId?: string): string {
    const text = parts.join("\u0000");
    const key = this.secret ?? (ownerId === undefined ? null : this.ownerKey(ownerId));
    const digest = key ? createHmac("sha256", key).update(text).digest("base64url") : createHash("sha256").update(text).digest("base64url");
    return `${prefix}${digest.slice(0, 32)}`;
  }

  /**
   * The HMAC key for ids derived for API key `ownerId` when no server secret is set: a subkey of
   * the key's configured SHA-256 (its own purpose label, so this HMAC never shares a key with
   * anything else made from that hash).
   */
  private ownerKey(ownerId: string): Buffer | null {
    const hash = this.ownerKeyHash(ownerId);
    return hash ? createHmac("sha256", hash).update("conveyor derived job ids v1").digest() : null;
  }
}
