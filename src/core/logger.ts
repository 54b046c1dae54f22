/** The logger shape Conveyor writes to; pino and console-like loggers fit it. */
export interface Logger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/** Writes one JSON line per entry to stderr; `info` only when `verbose`. */
export function consoleLogger(options: { verbose?: boolean } = {}): Logger {
  const write = (level: string, fields: object, message: string) => {
    process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, msg: message, ...fields }) + "\n");
  };
  return {
    info: (f, m) => {
      if (options.verbose) write("info", f, m);
    },
    warn: (f, m) => write("warn", f, m),
    error: (f, m) => write("error", f, m),
  };
}

/** Drops everything. */
export const silentLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };
