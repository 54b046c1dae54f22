/**
 * AMQP 0-9-1 plumbing shared by everything in Conveyor that talks to RabbitMQ (the outbox's
 * `AmqpTarget` and the `conveyor-jobs/amqp` backend): URL checks, opening a connection through
 * amqplib (an optional peer dependency, loaded on first use), and publishing with publisher
 * confirms under a deadline.
 *
 * A message counts as published only once the broker confirmed it: for a quorum queue that means
 * replicated to a majority and written to disk. Everything that must never lose a message
 * (enqueue, the retry or dead copy of a failed job, an outbox event) goes through
 * {@link publishConfirmed}.
 */
import type { ChannelModel, ConfirmChannel, Options } from "amqplib";
import { InvalidInputError } from "../core/errors.js";

/** How long to wait for the TCP + AMQP handshake when connecting, in ms. */
export const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Checks an `amqp://` / `amqps://` URL and returns a description safe for logs: scheme, host,
 * port and vhost, never the user or password. `who` names the caller in the error.
 */
export function describeAmqpUrl(url: unknown, who: string): string {
  if (typeof url !== "string") throw new InvalidInputError(`${who} needs { url: 'amqp://user:password@host:5672/vhost' }`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidInputError(`${who} url is not a URL: ${JSON.stringify(url.replace(/:[^:@/]*@/, ":***@"))}`);
  }
  if (parsed.protocol !== "amqp:" && parsed.protocol !== "amqps:") {
    throw new InvalidInputError(`${who} url must be amqp:// or amqps://; got ${parsed.protocol}`);
  }
  const port = parsed.port || (parsed.protocol === "amqps:" ? "5671" : "5672");
  return `${parsed.protocol}//${parsed.hostname}:${port}${parsed.pathname || "/"}`;
}

/**
 * Opens a connection. Errors on the connection object are swallowed here (amqplib would otherwise
 * throw them as unhandled 'error' events); callers learn of a lost connection from its 'close'.
 */
export async function openAmqpConnection(url: string, options: { heartbeatSeconds?: number } = {}): Promise<ChannelModel> {
  const { connect } = await import("amqplib");
  const connection = await connect(withHeartbeat(url, options.heartbeatSeconds), { timeout: CONNECT_TIMEOUT_MS, noDelay: true });
  connection.on("error", () => undefined);
  return connection;
}

/**
 * `url` asking for `heartbeatSeconds`, unless it names a heartbeat itself. amqplib reads the
 * heartbeat of a string URL from its query only (a `heartbeat` socket option is ignored), and
 * without one accepts the server's (RabbitMQ's default: 60 s).
 */
export function withHeartbeat(url: string, heartbeatSeconds: number | undefined): string {
  if (heartbeatSeconds === undefined) return url;
  const parsed = new URL(url);
  if (parsed.searchParams.has("heartbeat")) return url;
  parsed.searchParams.set("heartbeat", String(heartbeatSeconds));
  return parsed.toString();
}

/**
 * Publishes one message on a confirm channel; resolves once the broker confirmed it, rejects when
 * it refused it (nack) or the channel closed first. The caller bounds the wait with
 * {@link withTimeout} (per batch, so one timer serves many messages).
 */
export function publishConfirmed(channel: ConfirmChannel, exchange: string, routingKey: string, content: Buffer, options: Options.Publish): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    channel.publish(exchange, routingKey, content, options, (error: unknown) =>
      error ? reject(error instanceof Error ? error : new Error("the broker refused the message (nack)")) : resolve(),
    );
  });
}

/** `promise`, or the error `onTimeout` makes once `ms` have passed without an answer. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(onTimeout()), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
