/**
 * API keys, scopes and the short-lived tokens browsers use for Server-Sent Events.
 *
 * Keys are never kept in clear: configuration holds their SHA-256 (a key is 32 random bytes, so
 * a fast hash is enough — there is nothing to brute-force, unlike a password). A presented key is
 * hashed and compared with every configured hash in constant time (`crypto.timingSafeEqual`,
 * and no early exit), so response timing says nothing about which keys exist.
 *
 * Scopes:
 * - `enqueue`: add jobs; cancel the jobs this same key added.
 * - `read`: job status, job events, queue statistics and job listings (no payloads).
 * - `admin`: everything, including pause/resume, dead letters (with payloads and stacks),
 *   replay, delete and cancelling any job.
 *
 * Browsers cannot set headers on `EventSource`, and an API key in a URL ends up in proxy logs and
 * browser history. So the events stream also accepts `?access_token=`: a token minted by
 * `POST /v1/jobs/{id}/events/token` (read scope; your backend calls it and hands the URL to the
 * browser), HMAC-signed, valid for one job only and for a few minutes (default 10). Tokens
 * are checked when a stream opens; an open stream is not cut when its token expires. A token
 * A token stands for the key that asked for it: once that key id is no longer configured, or
 * lost the read scope (a restart with the new configuration), its tokens stop working too, even
 * for streams opened after the change; a stream already open runs on. Rotating a key under the
 * same id keeps its tokens. A token names the job's queue and creation time too: once that job is deleted, a new job that reuses
 * its id is another job, and the token does not open it (nor does an open stream follow it).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { InvalidInputError } from "../core/errors.js";
import { shown } from "../core/checks.js";

export type Scope = "enqueue" | "read" | "admin";
export const SCOPES: readonly Scope[] = ["enqueue", "read", "admin"];

/** One API key as configured. Give `sha256` (preferred) or `key`. */
export interface ApiKeyConfig {
  /**
   * A name for the key: shown in logs and recorded with the jobs it adds (never the key itself).
   * Letters, digits, `.`, `_`, `-`; 1-64 characters.
   */
  id: string;
  /** Lower-case hex SHA-256 of the key, as `hashApiKey(key)` or `conveyor serve --new-key` print it. */
  sha256?: string;
  /** The key in clear; hashed at startup and not kept. Prefer `sha256` in configuration. */
  key?: string;
  /** What the key may do; `admin` includes the other two. */
  scopes: readonly Scope[];
}

/** Who made a request. */
export interface Principal {
  /** The key's `id`, or "anonymous" when authentication is off. */
  id: string;
  scopes: ReadonlySet<Scope>;
  /** Set when the request authenticated with a stream token: the only job it may watch. */
  stream?: StreamGrant;
}

/**
 * The one job a stream token is for: its id, queue and creation time. The creation time tells
 * this job from a later one that reuses its id (after the first was deleted), which the token
 * must not open.
 */
export interface StreamGrant {
  jobId: string;
  queue: string;
  createdAt: number;
}

const KEY_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
const HEX_SHA256 = /^[0-9a-f]{64}$/;

/** Array.isArray without narrowing a typed list to any[] (configuration may come from JSON). */
function isList(value: unknown): boolean {
  return Array.isArray(value);
}

/** The SHA-256 of an API key, lower-case hex: what to put in configuration instead of the key. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** A new random API key: `cvk_` and 43 characters of base64url (32 random bytes). */
export function generateApiKey(): string {
  return `cvk_${randomBytes(32).toString("base64url")}`;
}

/** Full access, for servers running without authentication (`apiKeys: false`). */
export const ANONYMOUS: Principal = { id: "anonymous", scopes: new Set<Scope>(["admin", "enqueue", "read"]) };

/** The set of configured keys; `authenticate` turns a presented key into a principal. */
export class KeyRing {
  private readonly entries: Array<{ id: string; hash: Buffer; principal: Principal }>;

  constructor(keys: readonly ApiKeyConfig[]) {
    if (!isList(keys)) throw new InvalidInputError("apiKeys must be an array of { id, sha256 | key, scopes }, or false to turn authentication off");
    const seen = new Set<string>();
    this.entries = keys.map((k: ApiKeyConfig, i) => {
      const where = `apiKeys[${i}]`;
      if (typeof k?.id !== "string" || !KEY_ID_PATTERN.test(k.id)) {
        throw new InvalidInputError(`${where}.id must be 1-64 letters, digits, ".", "_" or "-"; got ${shown(k?.id)}`);
      }
      if (seen.has(k.id)) throw new InvalidInputError(`${where}.id "${k.id}" is used twice; give every key its own id`);
      seen.add(k.id);
      let hex: string;
      if (k.sha256 !== undefined) {
        hex = String(k.sha256).toLowerCase();
        if (!HEX_SHA256.test(hex)) throw new InvalidInputError(`${where}.sha256 must be 64 hex characters (hashApiKey(key) prints it)`);
        if (k.key !== undefined) throw new InvalidInputError(`${where}: give sha256 or key, not both`);
      } else if (typeof k.key === "string" && k.key.length >= 16) {
        hex = hashApiKey(k.key);
      } else {
        throw new InvalidInputError(`${where} needs sha256 (hex SHA-256 of the key) or key (at least 16 characters)`);
      }
      const given: unknown = k.scopes;
      if (!Array.isArray(given) || given.length === 0 || given.some((s) => !SCOPES.includes(s as Scope))) {
        throw new InvalidInputError(`${where}.scopes must list one or more of ${SCOPES.join(", ")}; got ${shown(k.scopes)}`);
      }
      const scopes = new Set<Scope>(k.scopes.includes("admin") ? SCOPES : k.scopes);
      return { id: k.id, hash: Buffer.from(hex, "hex"), principal: { id: k.id, scopes } };
    });
  }

  get size(): number {
    return this.entries.length;
  }

  /** The scopes the key with this id has now, or null once it is no longer configured (revoked). */
  scopesOf(id: string): ReadonlySet<Scope> | null {
    return this.entries.find((e) => e.id === id)?.principal.scopes ?? null;
  }

  /**
   * The SHA-256 of the key configured under this id now, or null once it is gone: lets a signed
   * credential made for one key (a dashboard session) tell it from a later key reusing the id.
   */
  keyHashOf(id: string): Buffer | null {
    return this.entries.find((e) => e.id === id)?.hash ?? null;
  }

  /** The principal of a presented key, or null. Takes the same time whichever key (if any) matches. */
  authenticate(presented: string): Principal | null {
    const hash = createHash("sha256").update(presented, "utf8").digest();
    let found: Principal | null = null;
    for (const entry of this.entries) {
      // No early exit: every configured key is compared on every request.
      if (timingSafeEqual(hash, entry.hash) && found === null) found = entry.principal;
    }
    return found;
  }
}

/**
 * Parses `--api-key` / `CONVEYOR_API_KEYS` entries: `ID:SCOPE[,SCOPE]:SHA256HEX`,
 * e.g. `web:enqueue,read:9f86d081…`.
 */
export function parseApiKeySpec(spec: string): ApiKeyConfig {
  const parts = spec.split(":");
  if (parts.length !== 3) {
    throw new InvalidInputError(`API key "${spec.split(":")[0]}…" must look like ID:SCOPE[,SCOPE]:SHA256HEX (e.g. web:enqueue,read:9f86d0…)`);
  }
  const [id, scopes, sha256] = parts as [string, string, string];
  return { id, sha256, scopes: scopes.split(",").map((s) => s.trim()) as Scope[] };
}

/** What a stream token carries. */
interface TokenClaims {
  /** Job id. */
  j: string;
  /** The job's queue. */
  q: string;
  /** The job's creation time, ms since epoch: its generation. */
  g: number;
  /** Principal id that asked for it. */
  p: string;
  /** Expiry, ms since epoch. */
  e: number;
}

/**
 * Signs and checks the job-scoped tokens of the events stream. With the default random secret,
 * tokens are only valid on the process that made them: give every instance behind one load
 * balancer the same `secret`.
 */
export class StreamTokens {
  private readonly secret: Buffer;

  constructor(secret?: string | Buffer) {
    if (secret === undefined) this.secret = randomBytes(32);
    else {
      this.secret = typeof secret === "string" ? Buffer.from(secret, "utf8") : secret;
      if (this.secret.length < 32) throw new InvalidInputError("streamTokenSecret must be at least 32 bytes; generate one with: openssl rand -base64 32");
    }
  }

  issue(job: StreamGrant, principalId: string, ttlMs: number, now = Date.now()): { token: string; expiresAt: number } {
    const claims: TokenClaims = { j: job.jobId, q: job.queue, g: job.createdAt, p: principalId, e: now + ttlMs };
    const body = Buffer.from(JSON.stringify(claims), "utf8").toString("base64url");
    return { token: `v1.${body}.${this.sign(body)}`, expiresAt: claims.e };
  }

  /** The principal a valid, unexpired token for `jobId` stands for, or null. */
  verify(token: string, jobId: string, now = Date.now()): Principal | null {
    const parts = token.split(".");
    if (parts.length !== 3 || parts[0] !== "v1") return null;
    const [, body, signature] = parts as [string, string, string];
    const expected = Buffer.from(this.sign(body), "utf8");
    const given = Buffer.from(signature, "utf8");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    let claims: TokenClaims;
    try {
      claims = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as TokenClaims;
    } catch {
      return null;
    }
    if (claims.j !== jobId || typeof claims.e !== "number" || claims.e < now) return null;
    if (typeof claims.q !== "string" || typeof claims.g !== "number") return null;
    return { id: String(claims.p), scopes: new Set<Scope>(["read"]), stream: { jobId, queue: claims.q, createdAt: claims.g } };
  }

  private sign(body: string): string {
    return createHmac("sha256", this.secret).update(`conveyor-stream-token.${body}`).digest("base64url");
  }
}

/**
 * The API key a request presents: `Authorization: Bearer <key>`, else `X-API-Key: <key>`.
 * An Authorization header of another scheme (Basic from a proxy in front, say) is not Conveyor's
 * and is ignored, so X-API-Key still works beside it. A Bearer header without exactly one token
 * is "invalid" (401), never skipped in favour of X-API-Key: a broken Bearer header is a
 * client's mistake to report, not to guess around.
 */
export function presentedKey(headers: Record<string, string | string[] | undefined>): { key: string } | { invalid: true } | null {
  const auth = headers.authorization;
  if (typeof auth === "string" && /^\s*Bearer(?:\s|$)/i.test(auth)) {
    const m = /^\s*Bearer\s+(\S+)\s*$/i.exec(auth);
    return m ? { key: m[1]! } : { invalid: true };
  }
  const key = headers["x-api-key"];
  return typeof key === "string" && key.length > 0 ? { key } : null;
}
