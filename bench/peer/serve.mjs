// serve.mjs starts PostGraphile 5 with the amber preset (what
// `postgraphile -P postgraphile/presets/amber -c <url> -s <schemas>` runs) on
// a free loopback port and prints {"port": N} on one line of stdout once it
// listens. The harness (bench/peer) runs it with the Node 22 that install.sh
// puts next to it.
//
//   node serve.mjs <database url> <schemas, comma-separated> <pool size>
import { createServer } from "node:http";
import { postgraphile } from "postgraphile";
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { makePgService } from "postgraphile/adaptors/pg";
import { grafserv } from "postgraphile/grafserv/node";

const [connectionString, schemas = "public", poolSize = "10"] = process.argv.slice(2);
if (!connectionString) {
  console.error("usage: node serve.mjs <database url> [schemas] [pool size]");
  process.exit(2);
}

const preset = {
  extends: [PostGraphileAmberPreset],
  pgServices: [
    makePgService({
      connectionString,
      schemas: schemas.split(","),
      poolConfig: { max: Number(poolSize) },
    }),
  ],
  grafserv: { graphiql: false, watch: false },
};

const pgl = postgraphile(preset);
const serv = pgl.createServ(grafserv);
const server = createServer();
server.on("error", (e) => {
  console.error(e);
  process.exit(1);
});
await serv.addTo(server);
// Build the schema before saying we listen, so the first request is not
// the one that pays for introspection.
await pgl.getSchema();
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    server.close();
    await pgl.release();
    process.exit(0);
  });
}
