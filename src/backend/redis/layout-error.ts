import { SchemaTooNewError } from "../migration-files.js";

/**
 * The Redis data is of a newer layout than this Conveyor writes (see LAYOUT_VERSION in keys.ts):
 * found at connect on `<prefix>:layout`, or by any later script on a queue a newer Conveyor has
 * written to since (the layout guard, `layout_guard` in lua/_common.lua). Nothing was read or
 * written. The worker stops on it, as on any SchemaTooNewError: this process would lose jobs it
 * cannot read. Upgrade conveyor in this process.
 */
export class RedisLayoutTooNewError extends SchemaTooNewError {
  override name = "RedisLayoutTooNewError";
  constructor(
    /** What carries the newer version: `prefix "conveyor"`, or `queue "emails" under prefix "conveyor"`. */
    where: string,
    storedVersion: number,
    codeVersion: number,
  ) {
    super(where, storedVersion, codeVersion);
    this.message =
      `the data of ${where} has layout version ${storedVersion}, newer than this Conveyor (knows up to ${codeVersion}); ` +
      `upgrade conveyor in this process (a newer Conveyor writes this data; this process cannot read what it stores, and stopped before touching it)`;
  }
}

/** The reply prefix of the layout guard's refusal: `CONVEYOR_LAYOUT_TOO_NEW <stored> <this layout>`. */
const GUARD_REPLY = /^CONVEYOR_LAYOUT_TOO_NEW (\d+) (\d+)/;

/**
 * The typed error for a layout guard refusal from a script whose first key was `firstKey` (a queue's
 * `<prefix>:{<queue>}:meta`), or null when `message` is some other error.
 */
export function layoutRefusal(message: string, firstKey: string | undefined): RedisLayoutTooNewError | null {
  const match = GUARD_REPLY.exec(message);
  if (match === null) return null;
  const queue = firstKey === undefined ? null : /^(.*):\{(.*)\}:meta$/s.exec(firstKey);
  const where = queue === null ? `key ${JSON.stringify(firstKey ?? "")}` : `queue ${JSON.stringify(queue[2])} under prefix ${JSON.stringify(queue[1])}`;
  return new RedisLayoutTooNewError(where, Number(match[1]), Number(match[2]));
}
