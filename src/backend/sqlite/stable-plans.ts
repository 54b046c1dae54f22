/**
 * Statements planned once, not on every run.
 *
 * better-sqlite3 builds SQLite with SQLITE_ENABLE_STAT4. With it, a statement that compares an
 * indexed column with a bound parameter, or takes its LIMIT from one, is marked to be compiled
 * again "on the first step after any change to the bindings of that parameter" (the
 * sqlite3_prepare documentation), so that the planner can look at the value. better-sqlite3 binds
 * every parameter on every run, so such a statement was parsed and planned again each time it
 * ran: a claim's candidate read cost what preparing it costs on top of its own work (50 rows: 60
 * µs against 22; the lane walk of a laned queue 230 µs per call against 53; measured in
 * docs/performance-sqlite.md, "Session 13"). The value can never help here: the backend has no
 * statistics tables (ANALYZE never runs), and one plan has to serve every value anyway.
 *
 * SQLite's own switch (SQLITE_DBCONFIG_ENABLE_QPSG, "the query planner stability guarantee") is
 * not reachable through better-sqlite3. What is: a parameter written `+?` (unary plus, which
 * returns its operand unchanged: same value, same type, no affinity, as a bare parameter has
 * none) is an expression the planner does not look into, yet an index is still used for
 * `column = +?` and `column <= +?`. {@link pinParameters} writes every parameter of a statement
 * so, and {@link planOnce} makes a connection's `prepare` do it for every statement, so no
 * statement of the backend can miss it.
 */
import type Database from "better-sqlite3";

/**
 * `sql` with every bound parameter (`?`, `?NNN`, `@name`, `:name`, `$name`) written as `+param`.
 * String literals, quoted identifiers and comments are copied as they are.
 */
export function pinParameters(sql: string): string {
  let out = "";
  let copied = 0;
  for (const at of parameterPositions(sql)) {
    out += `${sql.slice(copied, at)}+`;
    copied = at;
  }
  return out + sql.slice(copied);
}

/** Where each bound parameter of `sql` starts, outside string literals, quoted identifiers and comments. */
export function parameterPositions(sql: string): number[] {
  const positions: number[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "'" || c === '"' || c === "`" || c === "[") {
      // A quoted string or identifier; a doubled quote inside it is an escaped one.
      const close = c === "[" ? "]" : c;
      i++;
      while (i < sql.length && !(sql[i] === close && sql[i + 1] !== close)) i += sql[i] === close ? 2 : 1;
      i++;
    } else if (c === "-" && sql[i + 1] === "-") {
      const newline = sql.indexOf("\n", i);
      i = newline === -1 ? sql.length : newline;
    } else if (c === "/" && sql[i + 1] === "*") {
      const close = sql.indexOf("*/", i + 2);
      i = close === -1 ? sql.length : close + 2;
    } else if (PARAMETER_START.has(c) && !WORD.test(sql[i - 1] ?? " ")) {
      const name = PARAMETER.exec(sql.slice(i, i + 200))![0];
      // "@", ":" or "$" alone is not a parameter ("?" alone is).
      if (name.length > 1 || c === "?") positions.push(i);
      i += name.length;
    } else {
      i++;
    }
  }
  return positions;
}

const PARAMETER_START = new Set(["?", "@", ":", "$"]);
const PARAMETER = /^[?@:$]\w*/;
const WORD = /\w/;

/**
 * Makes `db.prepare` pin the parameters of every statement it prepares (see the module comment).
 * `exec` and `pragma` take no parameters and are left as they are.
 */
export function planOnce(db: Database.Database): Database.Database {
  const prepare = db.prepare.bind(db);
  db.prepare = (source: string) => prepare(pinParameters(source));
  return db;
}
