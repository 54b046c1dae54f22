import { parse, withBackend } from "./args.js";

export const help = `conveyor migrate --db URL

Creates or upgrades the schema. Safe to run many times and from many processes at once.`;

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, {});
  if (values.help) {
    console.log(help);
    return 0;
  }
  return withBackend(values.db, async (backend) => {
    await backend.migrate();
    console.log(`${backend.description}: schema is up to date`);
    return 0;
  });
}
