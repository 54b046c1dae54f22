/**
 * What every throwaway server of testkit/servers gives its caller (tests, bench, chaos): where it
 * listens, and how to crash, stop, start again and remove it. A server's own file adds what is
 * particular to it (a data directory, rabbitmqctl, a restart).
 */

/** A server on a free port of 127.0.0.1, in a temp directory of its own. */
export interface ThrowawayServer {
  /** The URL a client connects with (scheme of the store, 127.0.0.1, the port). */
  readonly url: string;
  readonly port: number;
  /** Stops the server and deletes its directory. Safe to call twice. */
  stop(): Promise<void>;
}

/** A server a test may crash and start again on the same port and data (fault tests, chaos). */
export interface CrashableServer extends ThrowawayServer {
  /** SIGKILLs it: no shutdown work, no goodbye to clients. */
  kill(): Promise<void>;
  /** Stops it gracefully (SIGTERM). */
  terminate(): Promise<void>;
  /** Starts it again on the same port and data (after kill or terminate); resolves once it answers. */
  start(): Promise<void>;
}
