package extauthz.conformance.transport;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;

import com.alibaba.csp.sentinel.Entry;
import com.alibaba.csp.sentinel.EntryType;
import com.alibaba.csp.sentinel.SphU;
import com.alibaba.csp.sentinel.context.ContextUtil;
import com.alibaba.csp.sentinel.init.InitExecutor;
import com.alibaba.csp.sentinel.slots.block.BlockException;
import com.alibaba.csp.sentinel.slots.block.authority.AuthorityRule;
import com.alibaba.csp.sentinel.slots.block.authority.AuthorityRuleManager;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParamFlowRule;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParamFlowRuleManager;
import com.alibaba.csp.sentinel.transport.config.TransportConfig;
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;

/**
 * Sentinel's own command center and heartbeat, as an application embedding Sentinel runs them
 * (the dashboard address, the command port and the application name come from the usual system
 * properties). The first line of standard input is a JSON object: paramFlowRules and
 * authorityRules (loaded with Sentinel's rule managers), and traffic, a list of {resource,
 * origin, arg} entered through Sentinel's slot chain one after the other. It prints
 * {"port": the command port, "passed": n, "blocked": n} once the command center serves and the
 * traffic is done, then serves until standard input closes, with a call to resource "tick"
 * every 200ms.
 */
public final class Reference {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        JSONObject setup = JSON.parseObject(in.readLine());
        List<ParamFlowRule> params = JSONArray.parseArray(setup.getString("paramFlowRules"), ParamFlowRule.class);
        List<AuthorityRule> authority = JSONArray.parseArray(setup.getString("authorityRules"), AuthorityRule.class);
        ParamFlowRuleManager.loadRules(params);
        AuthorityRuleManager.loadRules(authority);

        InitExecutor.doInit(); // the command center and the heartbeat, as on the first entry
        for (int i = 0; i < 200 && TransportConfig.getRuntimePort() <= 0; i++) {
            Thread.sleep(50);
        }

        // Sentinel's metric searcher never finds the first second of its metric log, and finds a
        // second only once a later one is written: a trickle of traffic on another resource,
        // from before the traffic on, keeps the log going, as in an application that serves.
        Thread tick = new Thread(() -> {
            while (true) {
                try {
                    SphU.entry("tick").exit();
                    Thread.sleep(200);
                } catch (BlockException ex) {
                    // no rule on tick
                } catch (InterruptedException ex) {
                    return;
                }
            }
        });
        tick.setDaemon(true);
        tick.start();
        Thread.sleep(2000);

        int passed = 0, blocked = 0;
        JSONArray traffic = setup.getJSONArray("traffic");
        for (int i = 0; traffic != null && i < traffic.size(); i++) {
            JSONObject t = traffic.getJSONObject(i);
            String resource = t.getString("resource");
            Object arg = t.getString("arg");
            ContextUtil.enter(resource, t.getString("origin"));
            try {
                Entry e = SphU.entry(resource, EntryType.IN, 1, arg);
                e.exit(1, arg);
                passed++;
            } catch (BlockException ex) {
                blocked++;
            } finally {
                ContextUtil.exit();
            }
        }
        JSONObject ready = new JSONObject();
        ready.put("port", TransportConfig.getRuntimePort());
        ready.put("passed", passed);
        ready.put("blocked", blocked);
        System.out.println(ready.toJSONString());
        System.out.flush();
        while (in.readLine() != null) {
            // serve until the test closes standard input
        }
        System.exit(0);
    }

    private Reference() {}
}
