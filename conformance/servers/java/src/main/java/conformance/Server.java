// The conformance matrix's server on the Java SDK (io.modelcontextprotocol.sdk:mcp): its servlet
// transports in embedded Tomcat, the same five tools as every server of the matrix, each execution
// counted, the counts read at GET /count.
//
//   java -jar conformance-java.jar MODE    MODE: stateful (HttpServletStreamableServerTransportProvider:
//                                          session ids, SSE answers) | stateless
//                                          (HttpServletStatelessServerTransport: JSON answers) | modern
//                                          (the 2026-07-28 era's McpServer and HttpServletMcpTransport:
//                                          JSON answers) | modern-streaming (the same, each tool
//                                          answering with McpSyncResponse.streaming: SSE answers)
//
// It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections.
package conformance;

import io.modelcontextprotocol.modern.McpException;
import io.modelcontextprotocol.modern.server.McpSyncResponse;
import io.modelcontextprotocol.modern.server.feature.McpSyncTool;
import io.modelcontextprotocol.modern.server.feature.McpSyncToolRepository;
import io.modelcontextprotocol.modern.server.feature.ToolsFeature;
import io.modelcontextprotocol.modern.server.feature.ToolsPage;
import io.modelcontextprotocol.modern.server.transport.HttpServletMcpTransport;
import io.modelcontextprotocol.server.McpServer;
import io.modelcontextprotocol.server.transport.HttpServletStatelessServerTransport;
import io.modelcontextprotocol.server.transport.HttpServletStreamableServerTransportProvider;
import io.modelcontextprotocol.spec.McpError;
import io.modelcontextprotocol.spec.McpSchema;
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
  private static final String NAME = "conformance-java";
  private static final int REJECTED = -32602;

  private Server() {}

  /** What a tool answers: its text as a result, as a tool error (isError), or a JSON-RPC error. */
  private enum Kind { RESULT, TOOL_ERROR, JSONRPC_ERROR }

  private record Answer(Kind kind, String text) {}

  /** A tool of the matrix, apart from either API: its one argument (or none) and what it does. */
  private record Tool(String name, String description, String argument, String type,
      Function<Map<String, Object>, Answer> run) {

    Map<String, Object> inputSchema() {
      return argument == null
          ? Map.of("type", "object")
          : Map.of("type", "object", "properties", Map.of(argument, Map.of("type", type)),
              "required", List.of(argument));
    }

    Answer call(Map<String, Object> arguments) {
      COUNTS.merge(name, 1, Integer::sum);
      return run.apply(arguments);
    }
  }

  private static int number(Map<String, Object> arguments, String name) {
    return ((Number) arguments.get(name)).intValue();
  }

  private static final List<Tool> TOOLS = List.of(
      new Tool("search", "read-only search", "query", "string",
          a -> new Answer(Kind.RESULT, "found " + a.get("query"))),
      new Tool("charge", "charges once per call", "amount", "number",
          a -> new Answer(Kind.RESULT, "charged " + number(a, "amount"))),
      new Tool("fail", "a tool error (isError)", null, null,
          a -> new Answer(Kind.TOOL_ERROR, "the tool failed")),
      new Tool("reject", "a JSON-RPC error", null, null,
          a -> new Answer(Kind.JSONRPC_ERROR, "rejected by the server")),
      new Tool("bulk", "an answer of the given size", "size", "number",
          a -> new Answer(Kind.RESULT, "x".repeat(number(a, "size")))));

  /** The legacy API's answer: a tool's McpError is answered with that JSON-RPC error. */
  private static McpSchema.CallToolResult legacy(Tool tool, McpSchema.CallToolRequest request) {
    Answer answer = tool.call(request.arguments());
    if (answer.kind() == Kind.JSONRPC_ERROR) {
      throw McpError.builder(REJECTED).message(answer.text()).build();
    }
    return McpSchema.CallToolResult.builder().addTextContent(answer.text())
        .isError(answer.kind() == Kind.TOOL_ERROR).build();
  }

  private static McpSchema.Tool legacyTool(Tool tool) {
    return McpSchema.Tool.builder().name(tool.name()).description(tool.description())
        .inputSchema(tool.inputSchema()).build();
  }

  private static McpSchema.ServerCapabilities legacyCapabilities() {
    return McpSchema.ServerCapabilities.builder().tools(false).build();
  }

  private static HttpServlet stateful() {
    var transport = HttpServletStreamableServerTransportProvider.builder().mcpEndpoint("/mcp").build();
    // The tool runs on Tomcat's own request thread: on Reactor's worker, the thread is now and then
    // interrupted before it writes the answer, and Tomcat drops it (docs/conformance.md).
    var server = McpServer.sync(transport).serverInfo(NAME, "1").capabilities(legacyCapabilities())
        .immediateExecution(true);
    TOOLS.forEach(tool -> server.toolCall(legacyTool(tool), (exchange, request) -> legacy(tool, request)));
    server.build();
    return transport;
  }

  private static HttpServlet stateless() {
    var transport = HttpServletStatelessServerTransport.builder().messageEndpoint("/mcp").build();
    var server = McpServer.sync(transport).serverInfo(NAME, "1").capabilities(legacyCapabilities());
    TOOLS.forEach(tool -> server.toolCall(legacyTool(tool), (context, request) -> legacy(tool, request)));
    server.build();
    return transport;
  }

  /** The 2026-07-28 API's answer: a tool's McpException is answered with that JSON-RPC error. */
  private static io.modelcontextprotocol.modern.McpSchema.CallToolResult modern(Tool tool,
      io.modelcontextprotocol.modern.McpSchema.CallToolRequest request) {
    Answer answer = tool.call(request.arguments() == null ? Map.of() : request.arguments());
    if (answer.kind() == Kind.JSONRPC_ERROR) {
      throw new McpException(REJECTED, answer.text());
    }
    var text = io.modelcontextprotocol.modern.McpSchema.TextContent.builder(answer.text()).build();
    return io.modelcontextprotocol.modern.McpSchema.CallToolResult.builder().addContent(text)
        .isError(answer.kind() == Kind.TOOL_ERROR).build();
  }

  /** A tool of the 2026-07-28 API, its result answered as is (JSON) or as a stream (SSE). */
  private static McpSyncTool modernTool(Tool tool, boolean streaming) {
    var definition = io.modelcontextprotocol.modern.McpSchema.Tool.builder(tool.name(), tool.inputSchema())
        .description(tool.description()).build();
    return McpSyncTool.of(definition, (context, request) -> streaming
        ? McpSyncResponse.streaming(notifier -> modern(tool, request))
        : McpSyncResponse.result(modern(tool, request)));
  }

  private static HttpServlet modern(boolean streaming) {
    Map<String, McpSyncTool> tools = TOOLS.stream()
        .collect(Collectors.toMap(Tool::name, tool -> modernTool(tool, streaming)));
    var repository = new McpSyncToolRepository() {
      @Override
      public ToolsPage list(io.modelcontextprotocol.modern.server.McpRequestContext context, String cursor) {
        return ToolsPage.of(tools.values().stream().map(McpSyncTool::definition).toList());
      }

      @Override
      public McpSyncTool find(io.modelcontextprotocol.modern.server.McpRequestContext context, String name) {
        return tools.get(name);
      }
    };
    var server = io.modelcontextprotocol.modern.server.McpServer.builder()
        .serverInfo(io.modelcontextprotocol.modern.McpSchema.Implementation.builder(NAME, "1").build())
        .feature(ToolsFeature.ofSync(repository)).build();
    return HttpServletMcpTransport.builder(server).endpoint("/mcp").build();
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

  private static void removeOnExit(Path base) {
    // Tomcat's work directory goes when the harness stops the server (SIGTERM runs this hook).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try (Stream<Path> paths = Files.walk(base)) {
        paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
      } catch (IOException e) {
        System.err.println("could not remove " + base + ": " + e);
      }
    }));
  }

  public static void main(String[] args) throws Exception {
    String mode = args.length > 0 ? args[0] : "stateful";
    HttpServlet mcp = switch (mode) {
      case "stateful" -> stateful();
      case "stateless" -> stateless();
      case "modern" -> modern(false);
      case "modern-streaming" -> modern(true);
      default -> {
        System.err.println("unknown mode " + mode);
        System.exit(2);
        yield null;
      }
    };
    Tomcat tomcat = new Tomcat();
    Path base = Files.createTempDirectory(NAME);
    removeOnExit(base);
    tomcat.setBaseDir(base.toString());
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
