/**
 * The event log switch shared by the stores that have one (Redis per key prefix, PostgreSQL per
 * schema, SQLite per table prefix): the option's check, the readers' refusal and the "processes disagree" refusal, so a
 * caller gets the same error whichever store runs with its log off.
 */
import { ConveyorError, InvalidInputError, UnsupportedByStoreError } from "../core/errors.js";
import { shown } from "../core/checks.js";

/** `eventLog` as given to a backend's options: `true` (the default) or `false`, nothing else. */
export function eventLogOption(value: unknown): boolean {
  if (value === undefined) return true;
  if (typeof value !== "boolean") throw new InvalidInputError(`eventLog must be true or false; got ${shown(value)}`);
  return value;
}

/** `?eventLog=on|off` in a backend URL: `undefined` when absent; any other value is refused. */
export function eventLogUrlParam(value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  if (value !== "on" && value !== "off") throw new InvalidInputError(`?eventLog= takes on or off; got ${shown(value.slice(0, 20))}`);
  return value === "on";
}

/**
 * What a reader of a switched-off log gets (`readEvents`, `latestEventCursor`, `pruneEvents`):
 * `what` is the refused action, `scope` the unit that holds one setting ("prefix", "schema").
 */
export function eventLogOffError(store: string, what: string, scope: string): UnsupportedByStoreError {
  return new UnsupportedByStoreError(
    store,
    "eventLog",
    `${what}: its event log is off (eventLog: false / ?eventLog=off); follow one job with queue.getJob or GET /v1/jobs/{id}/events, or use another ${scope} with the log on`,
  );
}

/**
 * A process configured with one setting on data that recorded the other: with two settings on one
 * store some changes would have events and others not, and a reader would miss them unknowingly.
 * `where` names the data (`prefix "x"`, `schema "y"`), `scope` its kind.
 */
export function eventLogMismatchError(where: string, scope: string, stored: boolean, wanted: boolean): ConveyorError {
  const word = (on: boolean) => (on ? "on" : "off");
  return new ConveyorError(
    `the data under ${where} keeps its event log ${word(stored)}, but this process was configured with ` +
      `eventLog ${word(wanted)}; all processes on one ${scope} must agree: pass eventLog: ${String(stored)} ` +
      `(?eventLog=${word(stored)} in a URL), or use another ${scope}`,
  );
}
