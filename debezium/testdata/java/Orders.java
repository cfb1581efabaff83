import java.util.*;
import java.util.stream.*;
import java.io.*;

// Reads lines of comma-separated keys; prints put, copy (JDK 19+ sizing) and sized orders.
public class Orders {
  public static void main(String[] a) throws Exception {
    BufferedReader r = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = r.readLine()) != null) {
      String[] keys = line.split(",", -1);
      HashMap<String,Object> put = new HashMap<>();
      for (String k : keys) put.put(k, 1);
      // JDK 19+ new HashMap<>(m): tableSizeFor(ceil(size/0.75)), then puts in m's order.
      HashMap<String,Object> copy = new HashMap<>((int)Math.ceil(put.size() / 0.75));
      for (String k : put.keySet()) copy.put(k, 1);
      // Collectors.toMap into a HashMap, then org.json's new HashMap<>(m.size()).
      Map<String,Object> collected = Arrays.stream(keys).distinct().collect(Collectors.toMap(k -> k, k -> (Object)1));
      HashMap<String,Object> sized = new HashMap<>(collected.size());
      for (Map.Entry<String,Object> e : collected.entrySet()) sized.put(e.getKey(), e.getValue());
      System.out.println(String.join(",", put.keySet()) + "|" + String.join(",", copy.keySet()) + "|" + String.join(",", sized.keySet()));
    }
  }
}
