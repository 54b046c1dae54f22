import { createHash } from "node:crypto";

/**
 * The one rule for text that names something in a store (job ids, dedup keys, flow groups and
 * limiter keys): no control characters, C0, DEL or C1 (PostgreSQL refuses NUL; U+009B is a
 * terminal's CSI, which a log or `conveyor jobs ls` would interpret) and no surrogate halves outside a
 * pair (stores turn them into U+FFFD, which another name may spell; a well-formed pair is one code
 * point above U+FFFF and passes). `checkJobId` (core/spec.ts), the option checks and the HTTP
 * schemas all use it.
 */

/** Longest job id (and dedup, group or limiter key), in UTF-16 code units. */
export const KEY_TEXT_MAX_LENGTH = 255;

/** The rule as a pattern read in Unicode mode (`new RegExp(p, "u")`, as JSON Schema validators do). */
export const KEY_TEXT_PATTERN = "^[^\\u0000-\\u001F\\u007F-\\u009F\\uD800-\\uDFFF]+$";

const KEY_TEXT = new RegExp(KEY_TEXT_PATTERN, "u");

/**
 * The rule for text that names something already stored: the one above without the C1 range,
 * which new ids and keys refuse only since this release (stores may hold ids made before). Lookups
 * (read, cancel, replay, a listing's cursor) take it, so such a job can still be read and
 * cancelled; every write of a new id takes KEY_TEXT_PATTERN.
 */
export const STORED_KEY_TEXT_PATTERN = "^[^\\u0000-\\u001F\\u007F\\uD800-\\uDFFF]+$";

/** True for 1-255 characters that follow the rule. */
export function isKeyText(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= KEY_TEXT_MAX_LENGTH && KEY_TEXT.test(value);
}

/**
 * Characters some store cannot keep as given: U+0000 (PostgreSQL's text refuses it, its jsonb
 * refuses its JSON escape) and a UTF-16 surrogate without its pair (every store's UTF-8 turns it
 * into U+FFFD, which other text may spell; PostgreSQL's jsonb refuses its escape).
 */
export const UNKEEPABLE_CHARACTER = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Longest idempotency key (`ctx.once`) a store keeps as given, in UTF-16 code units: at most 1,536
 * bytes of UTF-8, inside PostgreSQL's limit for one index entry (2,704 bytes; the keys are its
 * primary key).
 */
export const IDEMPOTENCY_KEY_MAX_LENGTH = 512;

/**
 * An idempotency key as the stores record it: as given when every store keeps it apart from every
 * other (at most IDEMPOTENCY_KEY_MAX_LENGTH characters, no UNKEEPABLE_CHARACTER), else
 * `sha256:` and the SHA-256 of its UTF-16 code units in hex. PostgreSQL failed a key holding
 * U+0000 or of about 8 KB with its own error, and every store's UTF-8 made "k\ud800" and "k\ufffd"
 * one key; a key built from a URL may well be longer than 512 characters.
 */
export function storedIdempotencyKey(key: string): string {
  if (key.length <= IDEMPOTENCY_KEY_MAX_LENGTH && !UNKEEPABLE_CHARACTER.test(key)) return key;
  return `sha256:${createHash("sha256").update(key, "utf16le").digest("hex")}`;
}
