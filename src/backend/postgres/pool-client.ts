/**
 * The connection class of the pools the PostgreSQL backend opens itself. It does two things every
 * such connection needs, and only these:
 * - it keeps the process alive when the connection dies while checked out (an `error` listener of
 *   its own, below);
 * - it turns JIT compilation off for its session as soon as it is open.
 *
 * Why no JIT: Conveyor's statements touch a few hundred rows through index probes, but once a table holds
 * about a million jobs the estimated cost of their generic plans passes `jit_above_cost`, and
 * PostgreSQL JIT-compiles every claim afresh (compiled code is not kept with the cached plan):
 * 0.1 to 1.6 s per claim of 500 jobs, measured in docs/performance-postgres.md ("The 1M collapse").
 * JIT never pays off for such statements, so each connection turns it off for its session as soon
 * as it is open, before the pool hands it out.
 */
import pg from "pg";
import type { Logger } from "../../core/logger.js";

/**
 * `Base` (pg.Client or a subclass) that always listens for its own `error` event and whose
 * connect() also runs `SET jit = off` (a failing SET is logged, not fatal).
 */
export function conveyorPoolClient(Base: typeof pg.Client, logger: Logger, description: string): typeof pg.Client {
  class ConveyorPoolClient extends Base {
    constructor(...args: ConstructorParameters<typeof pg.Client>) {
      super(...args);
      // A connection that dies while nobody listens for its "error" event (mid-connect, during the
      // SET below, or checked out between two queries, as in a primary's crash) would end the
      // process: an EventEmitter error without a listener is thrown. The error still reaches
      // every query it fails, and the pool still drops the connection (its own listener, added
      // while the connection is idle), so this listener only keeps the process alive.
      this.on("error", () => undefined);
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): void;
    override connect(callback?: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): Promise<pg.Client> | void {
      const done = super.connect().then(async () => {
        try {
          await this.query("SET jit = off");
        } catch (error) {
          // A server or proxy without the setting: the connection still works, with JIT as configured.
          logger.warn({ backend: description, error: (error as Error).message }, "could not turn JIT off on a new PostgreSQL connection");
        }
        return this;
      });
      if (callback === undefined) return done;
      const settle = callback as (err: Error | null, c?: pg.Client) => void;
      done.then(
        (client) => settle(null, client),
        (error: unknown) => settle(error instanceof Error ? error : new Error(String(error))),
      );
    }
  }
  return ConveyorPoolClient;
}
