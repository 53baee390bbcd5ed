// The conformance matrix's server on the Java SDK (io.modelcontextprotocol.sdk:mcp): its servlet
// transports in embedded Tomcat, the same five tools as every server of the matrix, each execution
// counted, the counts read at GET /count.
//
//   java -jar conformance-java.jar MODE    MODE: stateful (HttpServletStreamableServerTransportProvider:
//                                          session ids, SSE answers) | stateless
//                                          (HttpServletStatelessServerTransport: JSON answers)
//
// It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
package conformance;

import io.modelcontextprotocol.server.McpServer;
import io.modelcontextprotocol.server.transport.HttpServletStatelessServerTransport;
import io.modelcontextprotocol.server.transport.HttpServletStreamableServerTransportProvider;
import io.modelcontextprotocol.spec.McpError;
import io.modelcontextprotocol.spec.McpSchema;
import io.modelcontextprotocol.spec.McpSchema.CallToolRequest;
import io.modelcontextprotocol.spec.McpSchema.CallToolResult;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.catalina.Context;
import org.apache.catalina.Wrapper;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;

public final class Server {

  private static final Map<String, Integer> COUNTS = new ConcurrentHashMap<>();

  private Server() {}

  private static void ran(String tool) {
    COUNTS.merge(tool, 1, Integer::sum);
  }

  private static McpSchema.Tool tool(String name, String description, String property, String type) {
    Map<String, Object> schema = property == null
        ? Map.of("type", "object")
        : Map.of("type", "object", "properties", Map.of(property, Map.of("type", type)), "required",
            List.of(property));
    return McpSchema.Tool.builder().name(name).description(description).inputSchema(schema).build();
  }

  private static CallToolResult text(String s, boolean isError) {
    return CallToolResult.builder().addTextContent(s).isError(isError).build();
  }

  private static int number(CallToolRequest request, String name) {
    return ((Number) request.arguments().get(name)).intValue();
  }

  /** The five tools, each a handler of the request alone (both server kinds take one). */
  private static Map<McpSchema.Tool, Function<CallToolRequest, CallToolResult>> tools() {
    return Map.of(
        tool("search", "read-only search", "query", "string"),
        r -> { ran("search"); return text("found " + r.arguments().get("query"), false); },
        tool("charge", "charges once per call", "amount", "number"),
        r -> { ran("charge"); return text("charged " + number(r, "amount"), false); },
        tool("fail", "a tool error (isError)", null, null),
        r -> { ran("fail"); return text("the tool failed", true); },
        // The SDK answers a tool's McpError with that JSON-RPC error (any other throw: -32603).
        tool("reject", "a JSON-RPC error", null, null),
        r -> {
          ran("reject");
          throw McpError.builder(McpSchema.ErrorCodes.INVALID_PARAMS).message("rejected by the server").build();
        },
        tool("bulk", "an answer of the given size", "size", "number"),
        r -> { ran("bulk"); return text("x".repeat(number(r, "size")), false); });
  }

  private static HttpServlet stateful() {
    var transport = HttpServletStreamableServerTransportProvider.builder().mcpEndpoint("/mcp").build();
    var spec = McpServer.sync(transport).serverInfo("conformance-java", "1")
        .capabilities(McpSchema.ServerCapabilities.builder().tools(false).build());
    tools().forEach((tool, handler) -> spec.toolCall(tool, (exchange, request) -> handler.apply(request)));
    spec.build();
    return transport;
  }

  private static HttpServlet stateless() {
    var transport = HttpServletStatelessServerTransport.builder().messageEndpoint("/mcp").build();
    var spec = McpServer.sync(transport).serverInfo("conformance-java", "1")
        .capabilities(McpSchema.ServerCapabilities.builder().tools(false).build());
    tools().forEach((tool, handler) -> spec.toolCall(tool, (context, request) -> handler.apply(request)));
    spec.build();
    return transport;
  }

  /** GET /count: the executions so far, without a tool call. */
  private static final class Counts extends HttpServlet {
    @Override
    protected void doGet(HttpServletRequest request, HttpServletResponse response) throws IOException {
      String body = new TreeMap<>(COUNTS).entrySet().stream()
          .map(e -> "\"" + e.getKey() + "\":" + e.getValue())
          .collect(Collectors.joining(",", "{", "}"));
      response.setContentType("application/json");
      response.getOutputStream().write(body.getBytes(StandardCharsets.UTF_8));
    }
  }

  private static void mount(Context context, String name, HttpServlet servlet, String path) {
    Wrapper wrapper = Tomcat.addServlet(context, name, servlet);
    wrapper.setAsyncSupported(true); // the SDK's transports answer asynchronously
    context.addServletMappingDecoded(path, name);
  }

  public static void main(String[] args) throws Exception {
    String mode = args.length > 0 ? args[0] : "stateful";
    HttpServlet mcp = switch (mode) {
      case "stateful" -> stateful();
      case "stateless" -> stateless();
      default -> {
        System.err.println("unknown mode " + mode);
        System.exit(2);
        yield null;
      }
    };
    Tomcat tomcat = new Tomcat();
    Path base = Files.createTempDirectory("conformance-java");
    tomcat.setBaseDir(base.toString());
    // Tomcat's work directory goes when the harness stops the server (SIGTERM runs this hook).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try (Stream<Path> paths = Files.walk(base)) {
        paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
      } catch (IOException e) {
        System.err.println("could not remove " + base + ": " + e);
      }
    }));
    Connector connector = new Connector();
    connector.setPort(0);
    connector.setProperty("address", "127.0.0.1");
    tomcat.setConnector(connector);
    Context context = tomcat.addContext("", null);
    mount(context, "mcp", mcp, "/mcp");
    mount(context, "count", new Counts(), "/count");
    tomcat.start();
    System.out.println("READY " + connector.getLocalPort());
    System.out.flush();
    tomcat.getServer().await();
  }
}
