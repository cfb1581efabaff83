import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.text.SimpleDateFormat;
import java.util.Date;
import java.util.Locale;
import java.util.TimeZone;

// Reads lines "millis<TAB>pattern"; prints each formatted as
// TimestampRouter formats it (SimpleDateFormat in UTC), in English.
public class Dates {
  public static void main(String[] a) throws Exception {
    Locale.setDefault(Locale.ENGLISH);
    BufferedReader r = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = r.readLine()) != null) {
      String[] parts = line.split("\t", 2);
      SimpleDateFormat f = new SimpleDateFormat(parts[1]);
      f.setTimeZone(TimeZone.getTimeZone("UTC"));
      System.out.println(f.format(new Date(Long.parseLong(parts[0]))));
    }
  }
}
