// The Restate side of bench/peer/peer.py: the same three handlers as the
// Obelisk workflow in ../obelisk-workflow — noop (a trivial execution),
// steps (n durable steps, each a journaled `ctx.run`) and nap (two durable
// 500 ms sleeps, for the recovery row). Listens on the port given as argv[2].
//
// The SDK calls Promise.withResolvers (Node 22); on Node 20 it is defined
// here, as the standard says, before the SDK is loaded.
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
const restate = await import("@restatedev/restate-sdk");

const bench = restate.service({
  name: "bench",
  handlers: {
    noop: async (_ctx, input) => input,
    steps: async (ctx, n) => {
      let last = 0;
      for (let i = 0; i < n; i++) {
        last = await ctx.run(() => Math.floor(Math.random() * 1e9));
      }
      return last;
    },
    nap: async (ctx, ms) => {
      await ctx.sleep(ms);
      await ctx.sleep(ms);
      return "rested";
    },
  },
});

restate.endpoint().bind(bench).listen(Number(process.argv[2] || 9080));
