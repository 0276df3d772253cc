package extauthz.conformance;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;

import com.alibaba.csp.sentinel.Entry;
import com.alibaba.csp.sentinel.EntryType;
import com.alibaba.csp.sentinel.Env;
import com.alibaba.csp.sentinel.ResourceTypeConstants;
import com.alibaba.csp.sentinel.SphU;
import com.alibaba.csp.sentinel.adapter.gateway.common.param.GatewayParamParser;
import com.alibaba.csp.sentinel.adapter.gateway.common.param.RequestItemParser;
import com.alibaba.csp.sentinel.adapter.gateway.common.rule.GatewayFlowRule;
import com.alibaba.csp.sentinel.adapter.gateway.common.rule.GatewayRuleManager;
import com.alibaba.csp.sentinel.cluster.TokenResult;
import com.alibaba.csp.sentinel.cluster.TokenResultStatus;
import com.alibaba.csp.sentinel.cluster.flow.DefaultTokenService;
import com.alibaba.csp.sentinel.cluster.flow.rule.ClusterParamFlowRuleManager;
import com.alibaba.csp.sentinel.cluster.server.connection.ConnectionManager;
import com.alibaba.csp.sentinel.context.ContextUtil;
import com.alibaba.csp.sentinel.slots.block.BlockException;
import com.alibaba.csp.sentinel.slots.block.authority.AuthorityException;
import com.alibaba.csp.sentinel.slots.block.authority.AuthorityRule;
import com.alibaba.csp.sentinel.slots.block.authority.AuthorityRuleManager;
import com.alibaba.csp.sentinel.slots.block.flow.FlowException;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParamFlowException;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParamFlowRule;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParamFlowRuleManager;
import com.alibaba.csp.sentinel.slots.block.flow.param.ParameterMetricStorage;
import com.alibaba.csp.sentinel.util.TimeUtil;
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.TypeReference;
import org.mockito.MockedStatic;
import org.mockito.Mockito;

/**
 * Replay reads a JSON list of cases on standard input and writes one JSON line per request to
 * standard output, as Sentinel decides it.
 *
 * <p>A case holds Sentinel rules exactly as Sentinel's datasources store them (authorityRules,
 * paramFlowRules, gatewayRules: JSON lists, read with fastjson into Sentinel's own rule classes
 * and loaded through Sentinel's rule managers), the Java type of each positional argument
 * (argTypes: "String", "int", "long", "double", ...) and a trace. Each request of the trace
 * (t: milliseconds from the case's start; resource; origin; hits; args: per position null or a
 * list of values; or gateway: {headers, query, cookies, ip, host}, whose args Sentinel's own
 * GatewayParamParser extracts) goes through SphU.entry, so through Sentinel's slot chain:
 * AuthoritySlot, GatewayFlowSlot and ParamFlowSlot with their checkers.
 *
 * <p>Sentinel reads time through TimeUtil.currentTimeMillis; it is stubbed (Mockito's static
 * mocking, on this thread) to return the request's instant. A throttled request that Sentinel
 * lets through after a wait sleeps in ParamFlowChecker; the thread is interrupted before each
 * request, so that the sleep ends at once, and an interrupt flag consumed by the call tells that
 * Sentinel decided to wait.
 *
 * <p>A case with cluster: {clients: N} stands for Sentinel's token server with N connected
 * clients: its param-flow rules are loaded into ClusterParamFlowRuleManager under a namespace of
 * the case's own, and each request asks DefaultTokenService.requestParamToken for the rule's
 * flowId, with its hits and the values at the rule's paramIdx (a request whose rule the server
 * does not hold, one Sentinel skips as invalid, goes through the slot chain as above).
 */
public final class Replay {
    private static final long BASE = 1_700_000_000_000L;
    private static final long CASE_GAP = 10L * 24 * 3600 * 1000;
    private static final String CONTEXT = "extauthz_conformance";

    private static long now;

    private Replay() {}

    public static void main(String[] argv) throws IOException {
        String input = new String(readAll(System.in), StandardCharsets.UTF_8);
        JSONArray cases = JSON.parseArray(input);
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        try (MockedStatic<TimeUtil> clock = Mockito.mockStatic(TimeUtil.class, Mockito.CALLS_REAL_METHODS)) {
            clock.when(TimeUtil::currentTimeMillis).thenAnswer(inv -> now);
            for (int c = 0; c < cases.size(); c++) {
                runCase(c, cases.getJSONObject(c), out);
            }
        }
        out.flush();
    }

    private static void runCase(int index, JSONObject c, PrintStream out) {
        long start = BASE + index * CASE_GAP;
        now = start;
        String name = c.getString("name");
        List<AuthorityRule> authority = rules(c, "authorityRules", new TypeReference<List<AuthorityRule>>() {});
        List<ParamFlowRule> param = rules(c, "paramFlowRules", new TypeReference<List<ParamFlowRule>>() {});
        List<GatewayFlowRule> gateway = rules(c, "gatewayRules", new TypeReference<List<GatewayFlowRule>>() {});
        JSONArray trace = c.getJSONArray("trace");
        // No state of an earlier case may leak into this one.
        for (int i = 0; trace != null && i < trace.size(); i++) {
            ParameterMetricStorage.clearParamMetricForResource(trace.getJSONObject(i).getString("resource"));
        }
        AuthorityRuleManager.loadRules(authority);
        ParamFlowRuleManager.loadRules(param);
        GatewayRuleManager.loadRules(new HashSet<>(gateway));

        JSONObject loaded = new JSONObject(true);
        loaded.put("case", name);
        loaded.put("authority", AuthorityRuleManager.getRules().size());
        loaded.put("paramFlow", ParamFlowRuleManager.getRules().size());
        loaded.put("gateway", GatewayRuleManager.getRules().size());

        JSONArray argTypes = c.getJSONArray("argTypes");
        ParamFlowRule clusterRule = null;
        JSONObject cluster = c.getJSONObject("cluster");
        if (cluster != null) {
            String ns = "extauthz-conformance-" + index;
            for (int i = 0; i < cluster.getIntValue("clients"); i++) {
                ConnectionManager.addConnection(ns, "10.0.0." + (i + 1) + ":" + (7000 + i));
            }
            ClusterParamFlowRuleManager.registerPropertyIfAbsent(ns);
            ClusterParamFlowRuleManager.loadRules(ns, param);
            List<ParamFlowRule> held = ClusterParamFlowRuleManager.getParamRules(ns);
            loaded.put("cluster", held.size());
            clusterRule = held.isEmpty() ? null : held.get(0);
        }
        out.println(loaded.toJSONString());
        for (int i = 0; trace != null && i < trace.size(); i++) {
            JSONObject r = trace.getJSONObject(i);
            now = start + r.getLongValue("t");
            JSONObject d = clusterRule != null ? askTokenServer(clusterRule, r, argTypes) : decide(r, argTypes);
            d.put("case", name);
            d.put("i", i);
            out.println(d.toJSONString());
        }
    }

    /** askTokenServer asks Sentinel's token server for r's tokens under rule. */
    private static JSONObject askTokenServer(ParamFlowRule rule, JSONObject r, JSONArray argTypes) {
        int hits = r.containsKey("hits") ? r.getIntValue("hits") : 1;
        Object[] args = args(r.getJSONArray("args"), argTypes);
        List<Object> values = new ArrayList<>();
        int idx = rule.getParamIdx();
        Object v = idx >= 0 && idx < args.length ? args[idx] : null;
        if (v instanceof List) {
            values.addAll((List<?>) v);
        } else if (v != null) {
            values.add(v);
        }
        TokenResult res = new DefaultTokenService().requestParamToken(rule.getClusterConfig().getFlowId(), hits, values);
        JSONObject d = new JSONObject(true);
        boolean ok = res.getStatus() == TokenResultStatus.OK;
        d.put("allow", ok);
        if (!ok) {
            d.put("block", "param_flow");
        }
        d.put("waited", false);
        d.put("status", res.getStatus());
        return d;
    }

    private static <T> List<T> rules(JSONObject c, String key, TypeReference<List<T>> type) {
        String raw = c.getString(key);
        if (raw == null) {
            return new ArrayList<>();
        }
        List<T> list = JSON.parseObject(raw, type);
        return list == null ? new ArrayList<>() : list;
    }

    private static JSONObject decide(JSONObject r, JSONArray argTypes) {
        String resource = r.getString("resource");
        String origin = r.getString("origin");
        int hits = r.containsKey("hits") ? r.getIntValue("hits") : 1;
        JSONObject gw = r.getJSONObject("gateway");
        Object[] args = gw != null
            ? new GatewayParamParser<>(new Request()).parseParameterFor(resource, gw, rule -> true)
            : args(r.getJSONArray("args"), argTypes);

        JSONObject d = new JSONObject(true);
        ContextUtil.enter(CONTEXT, origin == null ? "" : origin);
        Thread.currentThread().interrupt();
        Entry e = null;
        try {
            if (gw != null) {
                e = Env.sph.entryWithType(resource, ResourceTypeConstants.COMMON_API_GATEWAY, EntryType.IN, hits, args);
            } else {
                e = SphU.entry(resource, EntryType.IN, hits, args);
            }
            d.put("allow", true);
        } catch (AuthorityException ex) {
            d.put("allow", false);
            d.put("block", "authority");
        } catch (ParamFlowException ex) {
            d.put("allow", false);
            d.put("block", "param_flow");
        } catch (FlowException ex) {
            d.put("allow", false);
            d.put("block", "flow");
        } catch (BlockException ex) {
            d.put("allow", false);
            d.put("block", ex.getClass().getSimpleName());
        } finally {
            // A flag still set: no sleep consumed it, so Sentinel did not wait.
            d.put("waited", !Thread.interrupted());
            if (e != null) {
                e.exit(hits, args);
            }
            ContextUtil.exit();
        }
        return d;
    }

    /** args builds the positional arguments: one value as itself, several as a list. */
    private static Object[] args(JSONArray raw, JSONArray argTypes) {
        if (raw == null) {
            return new Object[0];
        }
        Object[] args = new Object[raw.size()];
        for (int i = 0; i < raw.size(); i++) {
            JSONArray values = raw.getJSONArray(i);
            if (values == null) {
                continue;
            }
            String type = argTypes != null && i < argTypes.size() ? argTypes.getString(i) : "String";
            List<Object> typed = new ArrayList<>();
            for (int j = 0; j < values.size(); j++) {
                typed.add(typed(values.getString(j), type));
            }
            args[i] = typed.size() == 1 ? typed.get(0) : typed;
        }
        return args;
    }

    /**
     * typed is the argument an application with a parameter of type type receives for text, as
     * the boxed types' valueOf methods read it; text that is no such value stays a String.
     */
    private static Object typed(String text, String type) {
        try {
            switch (type) {
                case "int":
                case "java.lang.Integer":
                    return Integer.valueOf(text);
                case "long":
                case "java.lang.Long":
                    return Long.valueOf(text);
                case "short":
                case "java.lang.Short":
                    return Short.valueOf(text);
                case "byte":
                case "java.lang.Byte":
                    return Byte.valueOf(text);
                case "double":
                case "java.lang.Double":
                    return Double.valueOf(text);
                case "float":
                case "java.lang.Float":
                    return Float.valueOf(text);
                case "boolean":
                case "java.lang.Boolean":
                    return Boolean.valueOf(text);
                default:
                    return text;
            }
        } catch (NumberFormatException ex) {
            return text;
        }
    }

    /** Request reads a gateway request described as {headers, query, cookies, ip, host}. */
    private static final class Request implements RequestItemParser<JSONObject> {
        @Override
        public String getPath(JSONObject r) {
            return r.getString("path");
        }

        @Override
        public String getRemoteAddress(JSONObject r) {
            return r.getString("ip");
        }

        @Override
        public String getHeader(JSONObject r, String key) {
            if ("host".equalsIgnoreCase(key) && r.containsKey("host")) {
                return r.getString("host");
            }
            return lookup(r.getJSONObject("headers"), key, true);
        }

        @Override
        public String getUrlParam(JSONObject r, String name) {
            return lookup(r.getJSONObject("query"), name, false);
        }

        @Override
        public String getCookieValue(JSONObject r, String name) {
            return lookup(r.getJSONObject("cookies"), name, false);
        }

        private static String lookup(JSONObject m, String key, boolean foldCase) {
            if (m == null || key == null) {
                return null;
            }
            for (Map.Entry<String, Object> e : m.entrySet()) {
                if (foldCase ? e.getKey().equalsIgnoreCase(key) : e.getKey().equals(key)) {
                    return e.getValue() == null ? null : e.getValue().toString();
                }
            }
            return null;
        }
    }

    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        byte[] chunk = new byte[1 << 16];
        int n;
        while ((n = in.read(chunk)) > 0) {
            buf.write(chunk, 0, n);
        }
        return buf.toByteArray();
    }
}
