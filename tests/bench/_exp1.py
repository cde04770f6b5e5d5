import asyncio, time, statistics
import nats
from loopwire.testing import LoopwireContainer
from loopwire.testing.servers import start_nats, start_redis
from tests.bench.driver import BenchDriver, wait_for_tool
from tests.bench.trace import trace_turns
from tests.bench.procstat import CpuWindow
env={"LOOPWIRE_LLM_PROVIDER":"scripted","LOOPWIRE_TOOL_MODULES":"tests.bench.bench_tools","LOOPWIRE_LOG_LEVEL":"WARNING","PYTHONPATH":"/work/main"}
n=start_nats(False); r=start_redis(False)
lw=LoopwireContainer(env=env, use_docker=False); lw.nats=n; lw.redis=r
lw.start_loopwire()
async def main():
    nc=await nats.connect(n.url)
    await wait_for_tool(r.url,"noop")
    tc=await trace_turns(n.url, r.url)
    print(tc)
    d=BenchDriver(nc); await d.start()
    res=await d.run_sequential("single", 5, 20)
    q=statistics.quantiles(res.latencies_s, n=100)
    print("single p50", statistics.median(res.latencies_s)*1e3, "p99", q[98]*1e3, res.failures)
    w=CpuWindow({"lw":lw.proc.pid,"nats":n.proc.pid,"redis":r.proc.pid}).start()
    res=await d.run_load("load", 200, 20)
    print(w.stop())
    q=statistics.quantiles(res.latencies_s, n=100)
    print("load", res.turns_per_s, "p50", statistics.median(res.latencies_s)*1e3, "p99", q[98]*1e3, res.failures[:3], len(res.failures))
asyncio.run(main())
lw.stop_loopwire(); print(lw.logs()[-2000:]); n.stop(); r.stop()
