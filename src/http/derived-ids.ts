/**
 * Job ids the service derives itself: `idem_…` from an Idempotency-Key header, `whk_…` for a
 * webhook delivery. Both prefixes are reserved: a caller's own `options.jobId` may not start with
 * them, so no API key can take the id another key's request or another job's webhook will need.
 *
 * The hash is an HMAC keyed with a server secret when one is configured, so the ids cannot be
 * computed from public inputs either; without one it is a plain SHA-256 (the reserved prefixes
 * alone keep other keys from forging them). Changing the secret changes the ids: an
 * Idempotency-Key retried across the change, or a delivery re-sent by the sweep across it, is
 * then stored a second time.
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

  /** `secret`: at least 32 bytes, the same on every instance; none = unkeyed SHA-256. */
  constructor(secret: string | Buffer | undefined, option: string) {
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
   * another). Unkeyed, the ids are those of earlier versions, so an upgrade keeps them.
   */
  derive(prefix: string, parts: readonly string[]): string {
    const text = parts.join("\u0000");
    const digest = this.secret ? createHmac("sha256", this.secret).update(text).digest("base64url") : createHash("sha256").update(text).digest("base64url");
    return `${prefix}${digest.slice(0, 32)}`;
  }
}
