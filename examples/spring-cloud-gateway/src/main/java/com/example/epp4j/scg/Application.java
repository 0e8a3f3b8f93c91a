package com.example.epp4j.scg;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * The whole gateway: Spring Boot, Spring Cloud Gateway and epp4j's auto-configuration; the route
 * is in {@code application.yaml}, the replicas come from {@code --epp4j.endpoints}.
 */
@SpringBootApplication
public class Application {
  public static void main(String[] args) {
    SpringApplication.run(Application.class, args);
  }
}
